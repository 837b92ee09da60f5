"""The model's image preprocessing plus augmentation for training (`Augment`, `image_transforms`).
Built-in data sets are in `zoo.training.data.builtin`, users' own files are opened by
`zoo.training.data.kinds`; the Trainer's samplers and loaders are `zoo.training.loop.loaders`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch.nn as nn
from torchvision.transforms import InterpolationMode, v2

from zoo.bounds import Bounds, bounded, check_fields, count
from zoo.errors import InvalidArgumentError
from zoo.loading.transforms import (
    ConvertChannels,
    ResizeIfNeeded,
    ToNormalized,
    build_transforms,
)

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

    def __str__(self) -> str:
        """Only the fields set: ``Augment(hflip=True, crop_padding=2)``, or ``none``."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != f.default]
        return f"Augment({', '.join(shown)})" if shown else "none"


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
            steps.append(ResizeIfNeeded(preprocess["resize"], interpolation=interpolation, antialias=True))
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
    steps.append(ToNormalized(preprocess["mean"], preprocess["std"]))
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


def image_preprocess(
    model: nn.Module, data_chans: int, data_size: tuple[int, int], image_size: int | None
) -> tuple[dict[str, Any], int]:
    """The preprocessing images of ``data_size`` (``data_chans`` channels) get for ``model``:
    the weights' own (or [-1, 1] scaling for random weights), resized to ``image_size`` if
    asked, for the model's channel count (returned too)."""
    in_chans = getattr(model, "in_chans", data_chans)
    preprocess = dict(model.pretrained_cfg.get("preprocess") or default_preprocess(in_chans))
    if image_size is not None:
        if "crop" in preprocess and "resize" in preprocess:
            ratio = preprocess["resize"] / preprocess["crop"]
            preprocess |= {"resize": round(image_size * ratio), "crop": image_size}
        else:
            preprocess |= {"resize": image_size, "crop": image_size}
    elif "resize" not in preprocess and "crop" not in preprocess:  # one size for a folder of mixed sizes
        preprocess |= {"resize": list(data_size)}
    if in_chans == 1:
        preprocess["channels"] = 1
    size = preprocess.get("crop") or preprocess.get("resize") or min(data_size)
    minimum = getattr(model, "min_input_size", 1)
    if isinstance(size, int) and size < minimum:
        raise InvalidArgumentError(
            f"{model.pretrained_cfg.get('architecture')} needs images of at least {minimum}px and these are "
            f"{size}px: pass --image-size {minimum} or more"
        )
    return preprocess, in_chans
