"""Training data: Fashion-MNIST and the standard-library corpus offline, the model's image
preprocessing plus augmentation, and the samplers and loaders the Trainer reads datasets with.
Users' own files are read in `zoo.training.sources`."""

from __future__ import annotations

import gzip
import itertools
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.transforms import InterpolationMode, v2

from zoo.loading.transforms import ConvertChannels, build_transforms
from zoo.tokenizer import ByteTokenizer
from zoo.training.bounds import Bounds, bounded, check_fields, count

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian package dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
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
# Image preprocessing and augmentation


MAX_PADDING = 1024  # pixels of crop padding at most
AUGMENT_FLAGS = {
    "crop_padding": "--crop-padding",
    "random_resized_crop": "--random-resized-crop",
    "color_jitter": "--color-jitter",
    "random_erasing": "--random-erasing",
}


@dataclass
class Augment:
    """Training-time image augmentation, applied before the model's own normalisation."""

    hflip: bool = False
    # pad, then randomly crop back to size (the CIFAR recipe)
    crop_padding: int = field(default=0, metadata=bounded(count(0, MAX_PADDING)))
    # minimum area fraction of RandomResizedCrop
    random_resized_crop: float | None = field(default=None, metadata=bounded(Bounds(0, 1, low_open=True)))
    # brightness/contrast/saturation strength
    color_jitter: float = field(default=0.0, metadata=bounded(Bounds(0, 1)))
    trivial_augment: bool = False  # TrivialAugmentWide (Müller & Hutter, 2021)
    random_erasing: float = field(default=0.0, metadata=bounded(Bounds(0, 1)))  # probability of RandomErasing

    def __post_init__(self) -> None:
        check_fields(self, "Augment", AUGMENT_FLAGS)


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
