"""The preprocessing the weights were evaluated with, as torchvision transforms v2, and
`ConvertChannels`, the one conversion of any image to a model's channel count (used by
`zoo.transforms`, `zoo predict` and the training data sources alike)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from zoo.errors import InvalidArgumentError
from zoo.store.weight_entries import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ConvertChannels",
    "ResizeIfNeeded",
    "ToNormalized",
    "build_transforms",
    "text_length",
    "transforms",
]

TEXT_LENGTH = 512  # byte tokens per text row: zoo finetune's --max-length default


def text_length(model: nn.Module) -> int:
    """The byte tokens a text model reads per row: as many as it was fine-tuned with
    (``max_length`` in its configuration), else `TEXT_LENGTH`, never more than its positions."""
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", TEXT_LENGTH)
    return min(model.pretrained_cfg.get("max_length") or TEXT_LENGTH, positions)


def transforms(name_or_model: str | os.PathLike | Enum | nn.Module) -> Callable[[Any], torch.Tensor]:
    """The preprocessing the weights were evaluated with (torchvision transforms v2): PIL images
    or uint8 tensors in, a normalised float tensor out; of a model, or of any name `zoo.load`
    takes (registry names, saved and fine-tuned folders, ``hf-hub:`` repositories, torchvision's
    names of weights), read from what the name records (`zoo.info`), nothing loaded."""
    if isinstance(name_or_model, nn.Module):
        preprocess = name_or_model.pretrained_cfg.get("preprocess") or {}
    else:
        from zoo.loading.info import info  # the one description of every kind of name

        preprocess = info(name_or_model).preprocess
    if not preprocess:
        raise InvalidArgumentError("these weights record no image preprocessing")
    return build_transforms(preprocess)


def build_transforms(preprocess: dict[str, Any]) -> v2.Compose:
    """Convert to the model's channel count, resize and crop (on PIL images this uses PIL's
    resampling, as torchvision's weight transforms do), then convert to a float tensor and
    normalise."""
    steps: list[nn.Module] = [ConvertChannels(len(preprocess["mean"]))]
    if "resize" in preprocess:
        interpolation = InterpolationMode(preprocess.get("interpolation", "bilinear"))
        steps.append(ResizeIfNeeded(preprocess["resize"], interpolation=interpolation, antialias=True))
    if "crop" in preprocess:
        steps.append(v2.CenterCrop(preprocess["crop"]))
    return v2.Compose([*steps, ToNormalized(preprocess["mean"], preprocess["std"])])


class ResizeIfNeeded(v2.Resize):
    """``v2.Resize`` that hands a tensor image already at its output size straight back, as
    torchvision's kernel does, without v2's per-call dispatch: a data set of one size (a tensor
    file, Fashion-MNIST) gets a resize to that size, and it cost about 40 of 68 us a 28 x 28 image."""

    def forward(self, *inputs: Any) -> Any:
        image = inputs[0] if len(inputs) == 1 else None
        # plain tensors and images only (key points' last dimensions are not H and W); no max_size
        if type(image) in (torch.Tensor, tv_tensors.Image) and image.ndim >= 3 and self.max_size is None:
            height, width = image.shape[-2:]
            if list(self.size or []) in ([height, width], [min(height, width)]):
                return image
        return super().forward(*inputs)


class ToNormalized(nn.Module):
    """``v2.ToImage``, ``v2.ToDtype(torch.float32, scale=True)`` and ``v2.Normalize(mean, std)``
    in one step, the same arithmetic in the same order (the same numbers), without three
    transforms' dispatch per sample (a 28 x 28 gray image: 62 against 105 us, medians on a 2-core
    Xeon with other work on its cores); a uint8 tensor takes the arithmetic without the
    functions' own dispatch (28 against 55 us, 15 interleaved rounds, 2026-11-28)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self._values = (list(mean), list(std))
        self._tensors: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def mean(self) -> list[float]:
        return list(self._values[0])

    @property
    def std(self) -> list[float]:
        return list(self._values[1])

    def forward(self, image: Any) -> torch.Tensor:
        if not isinstance(image, torch.Tensor):
            image = v2.functional.to_image(image)
        image = image.as_subclass(torch.Tensor)
        mean, std = self._values
        if image.dtype == torch.uint8 and image.device.type == "cpu" and self._fits(image, mean, std):
            if self._tensors is None:  # the float32 (C, 1, 1) tensors normalize_image makes each call, once
                self._tensors = tuple(torch.as_tensor(v, dtype=torch.float32).view(-1, 1, 1) for v in (mean, std))
            # to_dtype_image's and normalize_image's arithmetic, in their order, without their dispatch
            return image.to(torch.float32).mul_(1.0 / 255).sub_(self._tensors[0]).div_(self._tensors[1])
        image = v2.functional.to_dtype_image(image, torch.float32, scale=True)
        return v2.functional.normalize_image(image, mean, std)

    @staticmethod
    def _fits(image: torch.Tensor, mean: list[float], std: list[float]) -> bool:
        """One mean and std per channel, none of them zero (else torchvision's checks answer)."""
        return image.ndim >= 3 and image.shape[-3] == len(mean) == len(std) and all(std)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


class ConvertChannels(nn.Module):
    """Bring an image of any mode to ``channels`` channels: 1 (gray), 3 (RGB) or 4 (RGBA).
    PIL images are converted by mode (palette, gray+alpha, CMYK, 16-bit included); tensors
    (..., C, H, W) with 1, 3 or 4 channels by luminance, repetition, or dropping/adding alpha."""

    _MODES = {1: "L", 3: "RGB", 4: "RGBA"}

    def __init__(self, channels: int) -> None:
        super().__init__()
        if channels not in self._MODES:
            raise InvalidArgumentError(f"images convert to 1, 3 or 4 channels, not {channels}")
        self.channels = channels

    def forward(self, image: Any) -> Any:
        if isinstance(image, Image.Image):
            if image.mode.startswith("I;16") or image.mode == "I":  # 16/32-bit gray: scale to 8 bits first
                image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8))
            return image if image.mode == self._MODES[self.channels] else image.convert(self._MODES[self.channels])
        have = image.shape[-3]
        if have == self.channels:
            return image
        rgb = (
            image[..., :3, :, :]
            if have == 4
            else image.expand(*image.shape[:-3], 3, *image.shape[-2:])
            if have == 1
            else image
        )
        if self.channels == 1:
            return v2.functional.rgb_to_grayscale(rgb)
        if self.channels == 3:
            return rgb
        opaque = torch.full_like(rgb[..., :1, :, :], 255 if rgb.dtype == torch.uint8 else 1)
        return torch.cat([rgb, opaque], dim=-3)

    def extra_repr(self) -> str:
        return f"channels={self.channels}"
