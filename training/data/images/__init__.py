"""Images for training: image folders (`image_folders`), image lists (`image_lists`: metadata.csv/.jsonl, Kaggle lists) and augmentation (`augment`)."""
