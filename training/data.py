"""Training data: Fashion-MNIST offline, image folders, text,label files, tensor files and PyG
datasets, split with a fixed seed, with the model's preprocessing plus augmentation, and the
samplers and loaders the Trainer reads them with."""
from __future__ import annotations

import csv
import gzip
import itertools
import json
import os
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset
from torchvision.transforms import InterpolationMode, v2

from zoo.api import ConvertChannels, build_transforms
from zoo.tokenizer import ByteTokenizer

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian package dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(split: str = "train", root: str | Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST images (uint8, [N, 28, 28]) and labels (int64, [N]) of the official
    ``train`` (60k) or ``test`` (10k) split, from the Debian package's files; elsewhere,
    torchvision downloads them into ``root``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    prefix = "train" if split == "train" else "t10k"
    directory = Path(root) if root is not None else FASHION_MNIST_DIR
    images = directory / f"{prefix}-images-idx3-ubyte.gz"
    labels = directory / f"{prefix}-labels-idx1-ubyte.gz"
    if images.is_file() and labels.is_file():
        return torch.from_numpy(_read_idx(images).copy()), torch.from_numpy(_read_idx(labels).astype(np.int64))
    if root is None:
        raise FileNotFoundError(
            f"Fashion-MNIST is not in {FASHION_MNIST_DIR}: install it with "
            "`apt-get install dataset-fashion-mnist` (make demo/test do it as root), "
            "or pass root= to download it with torchvision"
        )
    from torchvision.datasets import FashionMNIST

    dataset = FashionMNIST(str(directory), train=split == "train", download=True)
    return dataset.data, dataset.targets


STDLIB_EXCLUDED = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__"}


def stdlib_files() -> list[Path]:
    """This interpreter's standard-library ``.py`` files outside test, tool and package
    folders, sorted by path: the text corpus of the byte-level language models."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not STDLIB_EXCLUDED & set(p.relative_to(root).parts))


@lru_cache(maxsize=3)
def stdlib_corpus(split: str) -> torch.Tensor:
    """The byte stream (int16 token ids, files joined by the eos token) of a split of
    `stdlib_files`: file i is test when i % 20 == 0, validation when 1, training otherwise."""
    remainders = {"test": {0}, "val": {1}, "train": set(range(2, 20))}
    if split not in remainders:
        raise ValueError(f"split must be train, val or test, got {split!r}")
    ids: list[int] = []
    for i, path in enumerate(stdlib_files()):
        if i % 20 in remainders[split]:
            ids += [*path.read_bytes(), ByteTokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int16)


# ---------------------------------------------------------------------------------------------
# Training data: one `DataSource` per kind of input, split with a fixed seed into datasets that
# the Trainer's loaders read.

TEXT_COLUMNS = ("text", "label")
_FEATURE_KEYS = (("x", "y"), ("images", "labels"), ("data", "targets"), ("features", "labels"))


@dataclass
class Augment:
    """Training-time image augmentation, applied before the model's own normalisation."""

    hflip: bool = False
    crop_padding: int = 0  # pad, then randomly crop back to size (the CIFAR recipe)
    random_resized_crop: float | None = None  # minimum area fraction of RandomResizedCrop
    color_jitter: float = 0.0  # brightness/contrast/saturation strength
    trivial_augment: bool = False  # TrivialAugmentWide (Müller & Hutter, 2021)
    random_erasing: float = 0.0  # probability of RandomErasing

    def __post_init__(self) -> None:
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {self.crop_padding}")
        if self.random_resized_crop is not None and not 0.0 < self.random_resized_crop <= 1.0:
            raise ValueError(
                f"random_resized_crop is a minimum area fraction in (0, 1], got {self.random_resized_crop}"
            )
        if not 0.0 <= self.random_erasing <= 1.0:
            raise ValueError(f"random_erasing is a probability in [0, 1], got {self.random_erasing}")


def default_preprocess(in_chans: int) -> dict[str, Any]:
    """Normalisation for models without recorded preprocessing (trained from scratch):
    pixels scaled to [-1, 1] per channel."""
    return {"mean": [0.5] * in_chans, "std": [0.5] * in_chans}


def image_transforms(
    preprocess: dict[str, Any],
    image_size: tuple[int, int],
    augment: Augment | None = None,
    in_chans: int | None = None,
) -> v2.Compose:
    """The model's preprocessing (resize, crop, normalise; see `zoo.transforms`) for PIL
    images or uint8 tensors of ``image_size``; with ``augment``, the training version: the
    same geometry with random crops, flips and colour changes added. ``in_chans`` converts
    between grayscale and RGB when the images have the other count."""
    if augment is None:
        steps: list[nn.Module] = [ConvertChannels(in_chans)] if in_chans else []
        return v2.Compose([*steps, *build_transforms(preprocess).transforms])
    size = _output_size(preprocess, image_size)
    steps = [ConvertChannels(in_chans or len(preprocess["mean"]))]
    interpolation = InterpolationMode(preprocess.get("interpolation", "bilinear"))
    if augment.random_resized_crop is not None:
        scale = (augment.random_resized_crop, 1.0)
        steps.append(v2.RandomResizedCrop(size, scale=scale, interpolation=interpolation, antialias=True))
    else:
        if "resize" in preprocess:
            steps.append(v2.Resize(preprocess["resize"], interpolation=interpolation, antialias=True))
        if "crop" in preprocess:
            steps.append(v2.CenterCrop(preprocess["crop"]))
        if augment.crop_padding:
            steps.append(v2.RandomCrop(size, padding=augment.crop_padding))
    if augment.hflip:
        steps.append(v2.RandomHorizontalFlip())
    if augment.color_jitter:
        strength = augment.color_jitter
        steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
    if augment.trivial_augment:
        steps.append(v2.TrivialAugmentWide(interpolation=interpolation))
    steps += [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=preprocess["mean"], std=preprocess["std"]),
    ]
    if augment.random_erasing:
        steps.append(v2.RandomErasing(p=augment.random_erasing))
    return v2.Compose(steps)


def _output_size(preprocess: dict[str, Any], image_size: tuple[int, int]) -> tuple[int, int]:
    """The (H, W) that the eval transforms produce from images of ``image_size``."""
    if "crop" in preprocess:
        crop = preprocess["crop"]
        return (crop, crop) if isinstance(crop, int) else tuple(crop)
    if "resize" in preprocess:
        resize = preprocess["resize"]
        if not isinstance(resize, int):
            return tuple(resize)
        h, w = image_size  # an int resizes the shorter side, keeping the aspect ratio
        return (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)
    return image_size


@dataclass
class DataSource:
    """A labelled (or, for tensors, unlabelled) dataset on disk, described before any model
    is built: what the model must fit (classes, channels, image size) and how to batch it.
    `split` turns it into training and validation datasets."""

    kind: Literal["images", "tensors", "text", "graphs"]
    description: str
    num_samples: int
    num_classes: int | None
    class_names: list[str] | None
    make_subset: Callable[[Sequence[int], Callable[[Any], Any] | None], Dataset]
    in_chans: int | None = None  # image channels, or node features of graphs
    image_size: tuple[int, int] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None

    def split(
        self,
        val_fraction: float = 0.1,
        seed: int = 0,
        train_transform: Callable[[Any], Any] | None = None,
        eval_transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
    ) -> tuple[Dataset, Dataset | None]:
        """Training and validation datasets from one fixed-seed shuffle of the samples (the
        same seed gives the same split); ``limit`` keeps that many training samples."""
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(seed)).tolist()
        num_val = round(self.num_samples * val_fraction)
        if val_fraction > 0 and num_val == 0:
            num_val = 1
        val_indices, train_indices = order[:num_val], order[num_val:]
        if limit is not None:
            if limit <= 0:
                raise ValueError(f"limit must be a positive number of samples, got {limit}")
            train_indices = train_indices[:limit]
        if not train_indices:
            raise ValueError(f"{self.description}: no training samples left after holding out {num_val} for validation")
        train = self.make_subset(train_indices, train_transform)
        val = self.make_subset(val_indices, eval_transform) if val_indices else None
        return train, val

    def full(self, transform: Callable[[Any], Any] | None = None) -> Dataset:
        """Every sample, in file order (e.g. a separate validation set)."""
        return self.make_subset(range(self.num_samples), transform)


def open_data(source: str | os.PathLike | Dataset, *, max_length: int = 512) -> DataSource:
    """Describe a dataset: an image folder (torchvision ImageFolder layout: one sub-folder per
    class), a ``.csv``/``.jsonl`` of ``text,label`` rows, a tensor file (``.pt``, ``.npz``,
    ``.npy``), a PyG dataset object, or ``"fashion-mnist"`` (the offline copy)."""
    if _is_pyg_dataset(source):
        return _graph_source(source)
    if isinstance(source, Dataset):
        raise TypeError(
            f"open_data takes a path or a torch_geometric dataset, got {type(source).__name__}; "
            "pass other datasets to Trainer.fit directly"
        )
    if str(source) == "fashion-mnist":
        images, labels = load_fashion_mnist("train")
        return _tensor_source(images, labels, list(FASHION_MNIST_CLASSES), "Fashion-MNIST (train split)")
    path = Path(source).expanduser()
    if path.is_dir():
        return _image_folder_source(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; --data takes an image folder, a .csv/.jsonl of text,label rows, "
            "a .pt/.npz/.npy tensor file, or 'fashion-mnist'"
        )
    suffix = path.suffix.lower()
    if suffix in (".csv", ".jsonl"):
        return _text_source(path, max_length)
    if suffix in (".pt", ".pth", ".npz", ".npy"):
        return _tensor_file_source(path)
    raise ValueError(f"{path}: unknown data format {suffix!r}; use a folder of images, .csv, .jsonl, .pt, .npz or .npy")


def _is_pyg_dataset(source: object) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return False
    try:
        from torch_geometric.data import Dataset as PygDataset
    except ImportError:
        return False
    return isinstance(source, PygDataset)


class _ImageFiles(Dataset):
    """Images read from files with PIL, converted to ``mode``, then transformed."""

    def __init__(self, samples: list[tuple[str, int]], mode: str, transform: Callable[[Any], Any] | None) -> None:
        self.samples, self.mode, self.transform = samples, mode, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            image = image.convert(self.mode)
        return (self.transform(image) if self.transform else image), label


def _image_folder_source(root: Path) -> DataSource:
    try:
        classes, class_to_idx = find_classes(str(root))
        samples = make_dataset(str(root), class_to_idx, extensions=IMG_EXTENSIONS)
    except FileNotFoundError as error:
        raise ValueError(
            f"{root} is not an image folder: expected one sub-folder per class holding "
            f"{', '.join(IMG_EXTENSIONS)} files ({error})"
        ) from None
    with Image.open(samples[0][0]) as first:
        modes = {first.mode}
        image_size = (first.height, first.width)
    for path, _ in samples[1:16]:
        with Image.open(path) as image:
            modes.add(image.mode)
    in_chans = 1 if modes <= {"L", "1", "I", "I;16", "F"} else 3
    mode = "L" if in_chans == 1 else "RGB"

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _ImageFiles([samples[i] for i in indices], mode, transform)

    return DataSource(
        kind="images",
        description=f"image folder {root} ({len(samples)} images, {len(classes)} classes)",
        num_samples=len(samples),
        num_classes=len(classes),
        class_names=classes,
        make_subset=make_subset,
        in_chans=in_chans,
        image_size=image_size,
    )


class _TensorSamples(Dataset):
    """Rows of a tensor (images as uint8 [C, H, W], or feature vectors), with labels if given."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor | None, indices: Sequence[int], transform: Callable[[Any], Any] | None
    ) -> None:
        self.x, self.y, self.indices, self.transform = x, y, list(indices), transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        i = self.indices[index]
        sample = self.transform(self.x[i]) if self.transform else self.x[i]
        return (sample, self.y[i]) if self.y is not None else sample


def _tensor_source(
    x: torch.Tensor, y: torch.Tensor | None, class_names: list[str] | None, description: str
) -> DataSource:
    if y is not None:
        if len(y) != len(x):
            raise ValueError(f"{description}: {len(x)} samples but {len(y)} labels")
        if y.is_floating_point() or y.ndim != 1:
            raise ValueError(
                f"{description}: labels must be a 1-D integer tensor of class indices, got {y.dtype} {tuple(y.shape)}"
            )
        y = y.long()
    images = x.dtype == torch.uint8 and x.ndim in (3, 4)
    if images and x.ndim == 3:
        x = x.unsqueeze(1)  # [N, H, W] grayscale
    num_classes = int(y.max()) + 1 if y is not None and len(y) else None
    if class_names is None and num_classes is not None:
        class_names = [str(i) for i in range(num_classes)]

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _TensorSamples(x, y, indices, transform if images else None)

    return DataSource(
        kind="images" if images else "tensors",
        description=f"{description} ({len(x)} samples of shape {tuple(x.shape[1:])})",
        num_samples=len(x),
        num_classes=num_classes,
        class_names=class_names,
        make_subset=make_subset,
        in_chans=x.shape[1] if images else None,
        image_size=tuple(x.shape[-2:]) if images else None,
    )


def _tensor_file_source(path: Path) -> DataSource:
    """``.pt``: a tensor, an (x, y) pair or a dict with x/y (images/labels, data/targets);
    ``.npz``: arrays under those names; ``.npy``: one array of unlabelled samples."""
    if path.suffix.lower() == ".npy":
        return _tensor_source(torch.from_numpy(np.load(path)), None, None, str(path))
    if path.suffix.lower() == ".npz":
        with np.load(path) as arrays:
            content: Any = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    else:
        content = torch.load(path, map_location="cpu", weights_only=True)
    class_names = None
    if isinstance(content, torch.Tensor):
        x, y = content, None
    elif isinstance(content, (tuple, list)) and len(content) == 2:
        x, y = content
    elif isinstance(content, dict):
        keys = next((k for k in _FEATURE_KEYS if k[0] in content), None)
        if keys is None:
            names = [k[0] for k in _FEATURE_KEYS]
            raise ValueError(f"{path}: expected the samples under one of {names}, found {sorted(content)}")
        x, y = content[keys[0]], content.get(keys[1])
        class_names = content.get("classes")
    else:
        raise ValueError(
            f"{path}: expected a tensor, an (x, y) pair or a dict of tensors, got {type(content).__name__}"
        )
    return _tensor_source(torch.as_tensor(x), None if y is None else torch.as_tensor(y), class_names, str(path))


def _read_text_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} holds no rows")
    missing = [c for c in TEXT_COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(
            f"{path}: each row needs the fields {TEXT_COLUMNS}; missing {missing}, found {sorted(rows[0])}"
        )
    return rows


class TextBatches:
    """Collate (text, label) rows into ``{"input_ids", "attention_mask", "labels"}`` with the
    byte-level tokenizer of zoo's language models (right padding, ``max_length`` tokens kept)."""

    def __init__(self, max_length: int) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_length = max_length

    def __call__(self, rows: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = self.tokenizer([text for text, _ in rows], max_length=self.max_length)
        labels = torch.tensor([label for _, label in rows], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class _Rows(Dataset):
    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.rows[index]


def _text_source(path: Path, max_length: int) -> DataSource:
    """Texts and class indices; string labels are numbered in sorted order, integer labels
    are used as they are. Batches are byte-level tokens (`TextBatches`)."""
    rows = _read_text_rows(path)
    labels = [str(row["label"]).strip() for row in rows]
    if all(label.lstrip("-").isdigit() for label in labels):
        indices = [int(label) for label in labels]
        if min(indices) < 0:
            raise ValueError(f"{path}: integer labels must be class indices >= 0")
        class_names = [str(i) for i in range(max(indices) + 1)]
    else:
        class_names = sorted(set(labels))
        indices = [class_names.index(label) for label in labels]
    texts = [str(row["text"]) for row in rows]
    if not all(texts):
        raise ValueError(f"{path}: every row needs a non-empty text")
    samples = list(zip(texts, indices))

    def make_subset(subset: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _Rows([samples[i] for i in subset])

    return DataSource(
        kind="text",
        description=f"text file {path} ({len(rows)} rows, {len(class_names)} classes, byte tokens)",
        num_samples=len(rows),
        num_classes=len(class_names),
        class_names=class_names,
        make_subset=make_subset,
        collate_fn=TextBatches(max_length),
    )


def _graph_source(dataset: Any) -> DataSource:
    """A PyG dataset of graphs, batched by PyG's collater (one `Batch` per step)."""
    from torch_geometric.loader.dataloader import Collater

    if len(dataset) < 2:
        raise ValueError(
            f"{type(dataset).__name__} holds {len(dataset)} graph(s); training splits a dataset of many graphs "
            "(graph classification), not the nodes of one graph"
        )
    num_classes = int(dataset.num_classes)

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return dataset.index_select(list(indices))

    return DataSource(
        kind="graphs",
        description=f"{type(dataset).__name__} ({len(dataset)} graphs, {num_classes} classes)",
        num_samples=len(dataset),
        num_classes=num_classes,
        class_names=[str(i) for i in range(num_classes)],
        make_subset=make_subset,
        in_chans=int(dataset.num_features),  # node features
        collate_fn=Collater(dataset),
    )


# ---------------------------------------------------------------------------------------------
# Samplers and loaders


class EpochSampler(DistributedSampler):
    """`DistributedSampler` (a fixed-seed shuffle per epoch, one shard per process) that can
    start ``skip`` samples into its shard, so a resumed run reads exactly the rest of the
    interrupted epoch. Works without a process group (num_replicas=1, rank=0)."""

    def __init__(
        self, dataset: Dataset, num_replicas: int = 1, rank: int = 0, shuffle: bool = True, seed: int = 0
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return self.num_samples - self.skip


class ShardSampler(Sampler[int]):
    """Evaluation shard of one process: every ``num_replicas``-th sample in order, padded
    (repeating its last sample) so every process runs the same number of batches; the first
    ``num_valid`` indices are the real ones."""

    def __init__(self, dataset: Dataset, num_replicas: int = 1, rank: int = 0) -> None:
        size = len(dataset)
        self.indices = list(range(rank, size, num_replicas))
        self.num_valid = len(self.indices)
        padded = -(-size // num_replicas)
        if self.indices and len(self.indices) < padded:
            self.indices += [self.indices[-1]] * (padded - len(self.indices))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    sampler: Sampler[int],
    collate_fn: Callable[[list[Any]], Any] | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> DataLoader:
    """A DataLoader with worker options that only apply when there are workers; pass a
    ``generator`` so the workers' seeds come from it rather than the global RNG."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=4 if num_workers > 0 else None,
        generator=generator,
        drop_last=drop_last,
    )
