"""Feature extraction for every vision model, through its ``forward_intermediates`` and
``feature_info`` (timm's design, without FX tracing)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn


def feature_indices(indices: Sequence[int] | int | None, num_levels: int) -> list[int]:
    """Normalise feature-level indices (negatives count from the end, None means all) to a
    sorted list, with a clear error for levels the model does not have."""
    if indices is None:
        return list(range(num_levels))
    if isinstance(indices, int):
        indices = [indices]
    levels = set()
    for index in indices:
        if not -num_levels <= index < num_levels:
            raise ValueError(f"feature level {index} does not exist; the model has levels 0..{num_levels - 1}")
        levels.add(index % num_levels)
    return sorted(levels)


class FeatureExtractor(nn.Module):
    """Wraps a model so that calling it returns the list of feature maps at ``out_indices``;
    ``feature_info`` describes each map (channels, reduction, module)."""

    def __init__(self, model: nn.Module, out_indices: Sequence[int] | None = None) -> None:
        super().__init__()
        model.reset_classifier(0)
        self.model = model
        self.out_indices = feature_indices(out_indices, len(model.feature_info))
        self.feature_info = [model.feature_info[i] for i in self.out_indices]
        self.num_classes = 0
        self.pretrained_cfg: dict[str, Any] = {}

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.model.set_grad_checkpointing(enable)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.model.forward_intermediates(x, self.out_indices)
