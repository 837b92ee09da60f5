"""Multi-label and regression fine-tunes on an image list, beside a plain PyTorch loop.

The data: Fashion-MNIST's training split (the Debian package's files, read by
`zoo.training.data.builtin.load_fashion_mnist`), ``--train`` images for training and the next
``--val`` for validation, written as PNGs into two folders, each with a ``metadata.csv``
(Hugging Face's ``imagefolder`` layout) holding per image:

- ``tags``: what the garment is, several per image (`TAGS`: upper_body, lower_body, footwear,
  long_sleeves, warm, accessory), space-separated: a multi-label target;
- ``ink``: the share of the image's pixels over half brightness, in percent: a regression target.

Each target is fine-tuned twice from the same random ``resnet20`` (1 channel, 28 px), for the
same epochs at the same batch size, learning rate and weight decay: by ``zoo.finetune`` on the
folder (``--val-data`` the validation folder), and by a plain loop (AdamW, cosine schedule,
BCEWithLogits or MSE on standardised targets) on the same pixels as tensors. Both are then
scored the same way on the validation images, by scikit-learn: mAP (``average_precision_score``,
macro), micro and macro F1 at 0.5 and at the best-F1 threshold of each label on validation
(`zoo.training.loop.meter.multi_label_thresholds`, what zoo saves), MAE, RMSE and R² in the
target's units. zoo's model is the one it saved, loaded back with ``zoo.load``.

    .venv/bin/python benchmarks/image_lists.py [--train 1000] [--val 500] [--epochs 3] [--seeds 0 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from sklearn.metrics import average_precision_score, f1_score, mean_absolute_error, mean_squared_error, r2_score

import zoo
from zoo.training.data.builtin import load_fashion_mnist
from zoo.training.loop.meter import multi_label_thresholds

TAGS = {  # Fashion-MNIST class -> its tags
    0: ["upper_body"],  # T-shirt/top
    1: ["lower_body"],  # Trouser
    2: ["upper_body", "long_sleeves", "warm"],  # Pullover
    3: ["upper_body", "lower_body"],  # Dress
    4: ["upper_body", "long_sleeves", "warm"],  # Coat
    5: ["footwear"],  # Sandal
    6: ["upper_body", "long_sleeves"],  # Shirt
    7: ["footwear"],  # Sneaker
    8: ["accessory"],  # Bag
    9: ["footwear", "warm"],  # Ankle boot
}
NAMES = sorted({tag for tags in TAGS.values() for tag in tags})
SETTINGS = {"batch_size": 64, "lr": 1e-3, "weight_decay": 0.05}  # zoo finetune's defaults but the batch
COLUMNS = ["target", "trainer", "seed", "epochs", "train", "val", "seconds", "map", "f1_micro_0.5", "f1_macro_0.5",
           "f1_micro", "f1_macro", "mae", "rmse", "r2"]  # fmt: skip


def write_lists(work: Path, train: int, val: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The train/ and val/ folders of PNGs with their metadata.csv; per split the images
    [N, 28, 28], the multi-hot tags [N, K] and the ink [N]."""
    images, labels = load_fashion_mnist("train")
    images, labels = images.numpy(), labels.numpy()
    splits = {"train": slice(0, train), "val": slice(train, train + val)}
    arrays = {}
    for split, part in splits.items():
        folder = work / split
        folder.mkdir(parents=True)
        rows, hot, ink = [], [], []
        for i, (pixels, label) in enumerate(zip(images[part], labels[part])):
            Image.fromarray(pixels).save(folder / f"{i}.png")
            value = round(100 * float((pixels > 127).mean()), 3)
            rows.append(f"{i}.png,{' '.join(TAGS[int(label)])},{value}\n")
            hot.append([float(tag in TAGS[int(label)]) for tag in NAMES])
            ink.append(value)
        (folder / "metadata.csv").write_text("file_name,tags,ink\n" + "".join(rows))
        arrays[split] = (images[part], np.array(hot, dtype=np.float32), np.array(ink, dtype=np.float32))
    return arrays


def pixels(images: np.ndarray) -> torch.Tensor:
    """[N, 1, 28, 28] floats as zoo preprocesses a gray image for random weights: [-1, 1]."""
    return (torch.from_numpy(images).float().unsqueeze(1) / 255 - 0.5) / 0.5


@torch.no_grad()
def outputs(model: torch.nn.Module, images: np.ndarray) -> np.ndarray:
    model.eval()
    return torch.cat([model(batch) for batch in pixels(images).split(256)]).numpy()


def plain_loop(target: str, data: dict, epochs: int, seed: int) -> torch.nn.Module:
    """A hand-written loop: the same architecture, optimizer and schedule as zoo's defaults."""
    torch.manual_seed(seed)
    x, hot, ink = data["train"]
    y = torch.from_numpy(hot) if target == "tags" else torch.from_numpy((ink - ink.mean()) / ink.std(ddof=1))[:, None]
    model = zoo.load("resnet20", pretrained=False, num_classes=y.shape[1], in_chans=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=SETTINGS["lr"], weight_decay=SETTINGS["weight_decay"])
    steps = epochs * math.ceil(len(x) / SETTINGS["batch_size"])
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    inputs, generator = pixels(x), torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=generator).split(SETTINGS["batch_size"]):
            out = model(inputs[batch])
            loss = F.binary_cross_entropy_with_logits(out, y[batch]) if target == "tags" else F.mse_loss(out, y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    if target == "ink":  # back to the target's units, as zoo folds it into the head
        scale, shift = float(ink.std(ddof=1)), float(ink.mean())
        return torch.nn.Sequential(model, _Affine(scale, shift))
    return model


class _Affine(torch.nn.Module):
    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


def scores(target: str, model: torch.nn.Module, data: dict) -> dict[str, float]:
    """The validation metrics, by scikit-learn, of either trainer's model."""
    x, hot, ink = data["val"]
    out = outputs(model, x)
    if target == "ink":
        values = out[:, 0]
        return {"mae": mean_absolute_error(ink, values), "rmse": math.sqrt(mean_squared_error(ink, values)),
                "r2": r2_score(ink, values)}  # fmt: skip
    probabilities = 1 / (1 + np.exp(-out))
    chosen = probabilities >= np.asarray(multi_label_thresholds(probabilities, hot))
    half = probabilities >= 0.5
    return {
        "map": average_precision_score(hot, probabilities, average="macro"),
        "f1_micro_0.5": f1_score(hot, half, average="micro"),
        "f1_macro_0.5": f1_score(hot, half, average="macro", zero_division=0),
        "f1_micro": f1_score(hot, chosen, average="micro"),
        "f1_macro": f1_score(hot, chosen, average="macro", zero_division=0),
    }


def run_zoo(target: str, work: Path, epochs: int, seed: int) -> tuple[torch.nn.Module, dict[str, float]]:
    task = "multi-label" if target == "tags" else "regression"
    result = zoo.finetune(
        "resnet20", work / "train", work / f"zoo-{target}-{seed}", val_data=work / "val", label_field=target, task=task,
        epochs=epochs, seed=seed, precision="fp32", num_workers=0, progress=False, tensorboard=False,
        post_training=False, **SETTINGS,
    )  # fmt: skip
    return zoo.load(result.out), result.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--val", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="one run of each trainer per seed")
    parser.add_argument("--out", type=Path, default=Path("results/image_lists/fmnist-tags-ink.csv"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_lists(Path(tmp), args.train, args.val)
        for target, seed, trainer in itertools.product(("tags", "ink"), args.seeds, ("zoo", "plain")):
            start = time.perf_counter()
            if trainer == "zoo":
                model, reported = run_zoo(target, Path(tmp), args.epochs, seed)
                print(f"zoo {target}: reported {', '.join(f'{k} {v:.4f}' for k, v in reported.items())}")
            else:
                model = plain_loop(target, data, args.epochs, seed)
            seconds = time.perf_counter() - start
            row = {"target": target, "trainer": trainer, "seed": seed, "epochs": args.epochs, "train": args.train,
                   "val": args.val, "seconds": round(seconds, 1)}  # fmt: skip
            row |= {k: round(float(v), 4) for k, v in scores(target, model, data).items()}
            print(row, flush=True)
            rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
