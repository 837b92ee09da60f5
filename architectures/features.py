"""Feature extraction for every vision model, through its ``forward_intermediates`` and
``feature_info`` (timm's design and meanings, without FX tracing)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn as nn

Indices = int | Sequence[int] | None


def feature_take_indices(num_levels: int, indices: Indices = None) -> tuple[list[int], int]:
    """The absolute feature levels that ``indices`` asks for and the deepest of them, with
    timm's meaning (its ``feature_take_indices``): None all levels, an int n the last n,
    a sequence those levels (negatives count from the end)."""
    if indices is None:
        indices = num_levels
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)):
        raise ValueError(f"indices must be None, an int (the last n levels) or a list of levels, got {indices!r}")
    if isinstance(indices, int):
        if not 0 < indices <= num_levels:
            raise ValueError(
                f"indices={indices} asks for the last {indices} feature levels; the model has {num_levels} "
                f"(an int means the last n levels, as in timm: pass 1..{num_levels}, or a list of levels in 0..{num_levels - 1})"
            )
        take = list(range(num_levels - indices, num_levels))
    else:
        take = []
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not -num_levels <= index < num_levels:
                raise ValueError(
                    f"feature level {index!r} does not exist; the model has levels 0..{num_levels - 1} "
                    f"(or -{num_levels}..-1 from the end)"
                )
            take.append(index % num_levels)
        if not take:
            raise ValueError("indices is empty: name at least one feature level")
    return take, max(take)


def check_output_fmt(output_fmt: str, supported: Sequence[str] = ("NCHW",)) -> None:
    """Refuse a feature-map layout the model does not produce."""
    if output_fmt not in supported:
        raise ValueError(f"output_fmt={output_fmt!r} is not supported here; use one of {', '.join(supported)}")


class FeatureLevels:
    """timm's ``forward_intermediates`` for the conv nets, whose ``_run(x, take, last)`` runs up
    to feature level ``last`` keeping the maps of the levels in ``take``."""

    feature_info: FeatureInfo

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: Indices = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """timm's: the feature maps of the levels ``indices`` (None all, an int n the last n,
        a list those levels) and, unless ``intermediates_only``, first the final features
        (those of the deepest level asked for with ``stop_early``). ``norm`` has nothing to
        apply, as in timm's conv nets (the last level is already after any final norm)."""
        check_output_fmt(output_fmt)
        take, deepest = feature_take_indices(len(self.feature_info), indices)
        last = deepest if stop_early or intermediates_only else len(self.feature_info) - 1
        final, intermediates = self._run(x, take, last)
        return intermediates if intermediates_only else (final, intermediates)


class FeatureInfo:
    """The feature levels of a model, as timm's ``FeatureInfo``: ``info`` holds one dict per
    level (num_chs, reduction, module); ``channels()``, ``reduction()`` and ``module_name()``
    read the ``out_indices`` levels, or with ``idx`` the levels named; indexing, ``len`` and
    iteration run over every level."""

    def __init__(self, info: Sequence[dict[str, Any]], out_indices: Sequence[int] | None = None) -> None:
        self.info = [dict(level) for level in info]
        self.out_indices = tuple(range(len(self.info)) if out_indices is None else out_indices)

    def get(self, key: str, idx: int | Sequence[int] | None = None) -> Any:
        """``key`` of each ``out_indices`` level (idx None), of level ``idx``, or of each level in ``idx``."""
        if idx is None:
            return [self.info[i][key] for i in self.out_indices]
        if isinstance(idx, int):
            return self.info[idx][key]
        return [self.info[i][key] for i in idx]

    def get_dicts(self, keys: Sequence[str] | None = None, idx: int | Sequence[int] | None = None) -> Any:
        """The level dicts (only ``keys`` of them, if given) at ``out_indices`` or at ``idx``."""
        def pick(i: int) -> dict[str, Any]:
            return self.info[i] if keys is None else {k: self.info[i][k] for k in keys}

        if isinstance(idx, int):
            return pick(idx)
        return [pick(i) for i in (self.out_indices if idx is None else idx)]

    def channels(self, idx: int | Sequence[int] | None = None) -> Any:
        """Channels of the ``out_indices`` levels, or of the levels ``idx``."""
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None) -> Any:
        """Strides relative to the input of the ``out_indices`` levels, or of the levels ``idx``."""
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None) -> Any:
        """Module names of the ``out_indices`` levels, or of the levels ``idx``."""
        return self.get("module", idx)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.info[index]

    def __len__(self) -> int:
        return len(self.info)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.info)

    def __repr__(self) -> str:
        return f"FeatureInfo({self.info}, out_indices={self.out_indices})"


class FeatureExtractor(nn.Module):
    """Wraps a model so that calling it returns the list of feature maps at ``out_indices``
    (timm's meaning: None all levels, an int n the last n, a sequence those levels), in level
    order; ``feature_info.channels()`` etc. describe those maps."""

    def __init__(self, model: nn.Module, out_indices: Indices = None) -> None:
        super().__init__()
        model.reset_classifier(0)
        self.model = model
        self.out_indices = sorted(set(feature_take_indices(len(model.feature_info), out_indices)[0]))
        self.feature_info = FeatureInfo(model.feature_info.info, self.out_indices)
        self.num_classes = 0
        self.in_chans = model.in_chans  # what the maps are computed from: exporters build example inputs by it
        self.pretrained_cfg: dict[str, Any] = {}

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """The wrapped model's activation checkpointing, on or off."""
        self.model.set_grad_checkpointing(enable)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.model.forward_intermediates(x, self.out_indices, intermediates_only=True)
