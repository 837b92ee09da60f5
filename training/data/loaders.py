"""The model's image preprocessing plus augmentation, and the samplers and loaders the Trainer
reads datasets with. Built-in data sets are in `zoo.training.data.builtin`, users' own files are
opened by `zoo.training.data.kinds`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.transforms import InterpolationMode, v2

from zoo.loading.transforms import ConvertChannels, build_transforms
from zoo.training.loop.bounds import Bounds, bounded, check_fields, count

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
