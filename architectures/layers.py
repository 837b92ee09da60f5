"""Building blocks shared by several architecture families."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn


def make_divisible(
    v: float, divisor: int = 8, min_value: int | None = None, round_limit: float = 0.9
) -> int:
    """Round a channel count to the nearest multiple of ``divisor`` (at least ``min_value``),
    going up a step when rounding would lose more than ``1 - round_limit`` of ``v``; the
    rule timm and torchvision use, so channel counts match their checkpoints."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < round_limit * v:
        new_v += divisor
    return new_v


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation channel gate (Hu et al., 2018): global mean, 1x1 conv down,
    activation, 1x1 conv up, gate, rescale. Parameter names (``fc1``, ``fc2``) equal timm's
    SEModule and torchvision's SqueezeExcitation, so their weights load unchanged."""

    def __init__(
        self,
        channels: int,
        rd_ratio: float = 1 / 16,
        rd_channels: int | None = None,
        rd_divisor: int = 8,
        act_layer: type[nn.Module] = nn.ReLU,
        gate: Literal["sigmoid", "hard_sigmoid"] = "sigmoid",
    ) -> None:
        super().__init__()
        if gate not in ("sigmoid", "hard_sigmoid"):
            raise ValueError(f"gate must be 'sigmoid' or 'hard_sigmoid', got {gate!r}")
        if rd_channels is None:
            rd_channels = make_divisible(channels * rd_ratio, rd_divisor, round_limit=0.0)
        self.fc1 = nn.Conv2d(channels, rd_channels, kernel_size=1)
        self.act = act_layer()
        self.fc2 = nn.Conv2d(rd_channels, channels, kernel_size=1)
        self.gate = nn.Sigmoid() if gate == "sigmoid" else nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True))))
        return x * self.gate(scale)


def check_image_input(x: torch.Tensor, in_chans: int, min_size: int, name: str) -> None:
    """Raise a ValueError naming the model and the shape it expects unless ``x`` is an image
    batch (N, in_chans, H, W) with H, W >= min_size; a clear message beats a shape error deep
    inside a convolution."""
    expected = f"{name} expects input of shape (N, {in_chans}, H, W) with H, W >= {min_size}"
    got = tuple(x.shape)
    if x.ndim != 4:
        hint = "; add a batch dimension with x.unsqueeze(0)" if x.ndim == 3 else ""
        raise ValueError(f"{expected}; got a {x.ndim}-D tensor of shape {got}{hint}")
    if x.shape[1] != in_chans:
        raise ValueError(
            f"{expected}; got {got}: load the model with "
            f"in_chans={x.shape[1]} or convert the images to {in_chans} channels"
        )
    if x.shape[2] < min_size or x.shape[3] < min_size:
        raise ValueError(f"{expected}; got {got}: images must be at least {min_size}x{min_size} pixels")


def linear_classifier(num_features: int, num_classes: int) -> nn.Module:
    """The classifier every family's ``reset_classifier`` installs: a freshly initialised
    ``num_classes``-way linear layer, or the identity for 0 so the model returns features."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes must be an int >= 0 (0 removes the classifier), got {num_classes!r}")
    return nn.Linear(num_features, num_classes) if num_classes > 0 else nn.Identity()
