"""Feature extraction for every vision model, through its ``forward_intermediates`` and
``feature_info`` (timm's design and meanings, without FX tracing)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn as nn

from ._errors import InvalidArgumentError
from .layers import DefaultCfg

Indices = int | Sequence[int] | None


def feature_take_indices(num_levels: int, indices: Indices = None) -> tuple[list[int], int]:
    """The absolute feature levels that ``indices`` asks for and the deepest of them, with
    timm's meaning (its ``feature_take_indices``): None all levels, an int n the last n,
    a sequence those levels (negatives count from the end)."""
    if indices is None:
        indices = num_levels
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)):
        raise InvalidArgumentError(
            f"indices must be None, an int (the last n levels) or a list of levels, got {indices!r}"
        )
    if isinstance(indices, int):
        if not 0 < indices <= num_levels:
            raise InvalidArgumentError(
                f"indices={indices} asks for the last {indices} feature levels; the model has {num_levels} "
                f"(an int means the last n levels, as in timm: pass 1..{num_levels}, or a list of levels in 0..{num_levels - 1})"
            )
        take = list(range(num_levels - indices, num_levels))
    else:
        take = []
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not -num_levels <= index < num_levels:
                raise InvalidArgumentError(
                    f"feature level {index!r} does not exist; the model has levels 0..{num_levels - 1} "
                    f"(or -{num_levels}..-1 from the end)"
                )
            take.append(index % num_levels)
        if not take:
            raise InvalidArgumentError("indices is empty: name at least one feature level")
    return take, max(take)


def check_output_fmt(output_fmt: str, supported: Sequence[str] = ("NCHW",)) -> None:
    """Refuse a feature-map layout the model does not produce."""
    if output_fmt not in supported:
        raise InvalidArgumentError(
            f"output_fmt={output_fmt!r} is not supported here; use one of {', '.join(supported)}"
        )


class FeatureLevels:
    """timm's ``forward_intermediates`` for the conv nets, whose ``_run(x, take, last)`` runs up
    to feature level ``last`` keeping the maps of the levels in ``take``. (No class
    annotations: TorchScript would take them for the types of the models' attributes.)"""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Drop the runtime annotations of the model's ``forward`` (the source keeps them), as
        timm's models have none: FX copies them into the code of a traced graph as names that
        ``torch.jit.script`` cannot resolve (torch 2.14: torchvision's annotated models fail
        there), so a zoo model's FX graph would not script as timm's does. TorchScript takes an
        unannotated argument for a Tensor, as the annotation said."""
        super().__init_subclass__(**kwargs)
        forward = cls.__dict__.get("forward")
        if forward is not None:
            forward.__annotations__ = {}

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

    def final_map_size(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) of ``forward_features``' map for a height x width input (timm's ``pool_size`` at
        ``input_size``): each padded stride keeps ceil(side / stride), so ceil(side / total stride)."""
        reduction = self.feature_info[-1]["reduction"]
        return math.ceil(height / reduction), math.ceil(width / reduction)


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


FEATURE_CLASSES = ("getter", "hook", "fx")  # timm's feature_cls values zoo builds


def feature_extractor(
    model: nn.Module, out_indices: Indices = None, feature_cls: str | None = None
) -> FeatureExtractor:
    """The feature extractor timm's ``feature_cls`` names, each returning the same maps:
    "getter" (the default, `FeatureExtractor`: the model's ``forward_intermediates``), "hook"
    (`HookFeatureExtractor`: forward hooks on the modules ``feature_info`` names) or "fx"
    (`FxFeatureExtractor`: an FX graph cut at those modules)."""
    classes = {"getter": FeatureExtractor, "hook": HookFeatureExtractor, "fx": FxFeatureExtractor}
    if feature_cls is not None and feature_cls not in classes:
        raise InvalidArgumentError(
            f"feature_cls={feature_cls!r} is not one zoo builds: pass 'getter' (the default), 'hook' or 'fx', "
            "which all return the list of feature maps (timm's 'dict' returns a dict, which zoo's model contract does not)"
        )
    return classes[feature_cls or "getter"](model, out_indices)


class FeatureExtractor(DefaultCfg, nn.Module):
    """Wraps a model so that calling it returns the list of feature maps at ``out_indices``
    (timm's meaning: None all levels, an int n the last n, a sequence those levels), in level
    order; ``feature_info.channels()`` etc. describe those maps. It is timm's
    ``feature_cls="getter"``: the maps come from the model's ``forward_intermediates``, and a
    conv net's extractor compiles with ``torch.jit.script``."""

    def __init__(self, model: nn.Module, out_indices: Indices = None) -> None:
        super().__init__()
        model.reset_classifier(0)
        self.model = model
        self.out_indices = sorted(set(feature_take_indices(len(model.feature_info), out_indices)[0]))
        self.feature_info = FeatureInfo(model.feature_info.info, self.out_indices)
        self.num_classes = 0
        self.in_chans = model.in_chans  # what the maps are computed from: exporters build example inputs by it
        self.pretrained_cfg = {}  # no annotation in __init__: TorchScript warns on annotated dicts there

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """The wrapped model's activation checkpointing, on or off."""
        self.model.set_grad_checkpointing(enable)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        if torch.jit.is_scripting():  # the conv nets' scriptable run to the deepest level asked for
            return self.model._run(x, self.out_indices, self.out_indices[-1])[1]
        return self.model.forward_intermediates(x, self.out_indices, intermediates_only=True)


def _conv_net(model: nn.Module, feature_cls: str) -> None:
    """Refuse ``feature_cls`` for a model whose levels are not module outputs (a ViT's blocks)."""
    if not isinstance(model, FeatureLevels):
        raise InvalidArgumentError(
            f"feature_cls={feature_cls!r} reads feature maps at the modules feature_info names, but "
            f"{getattr(model, 'name', type(model).__name__)}'s levels are transformer blocks whose outputs are "
            "(tokens, router logits); use feature_cls='getter' (the default), which returns its maps"
        )


class HookFeatureExtractor(FeatureExtractor):
    """timm's ``feature_cls="hook"``: forward hooks on the modules that ``feature_info`` names
    keep their outputs while the model's ``forward_features`` runs; the same maps as the
    getter's, for code that reads maps at modules. Python hooks do not script."""

    def __init__(self, model: nn.Module, out_indices: Indices = None) -> None:
        _conv_net(model, "hook")
        super().__init__(model, out_indices)
        self.hooked = list(self.feature_info.module_name())
        self._maps: dict[str, torch.Tensor] = {}
        for name in self.hooked:
            self.model.get_submodule(name).register_forward_hook(partial(self._keep, name))

    def _keep(self, name: str, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self._maps[name] = output

    def __prepare_scriptable__(self) -> nn.Module:
        raise InvalidArgumentError(
            "a feature_cls='hook' extractor keeps its maps through Python forward hooks, which "
            "torch.jit.script cannot compile; build it with feature_cls='getter' or 'fx'"
        )

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        self._maps.clear()
        self.model.forward_features(x)
        maps = [self._maps.pop(name) for name in self.hooked]
        return maps


def _has_submodule(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


class FxFeatureExtractor(FeatureExtractor):
    """timm's ``feature_cls="fx"``: the model traced by torch.fx (torchvision's
    ``create_feature_extractor``) and cut at the modules ``feature_info`` names, so ``model``
    is a ``GraphModule`` returning the same maps as the getter's; it scripts too."""

    def __init__(self, model: nn.Module, out_indices: Indices = None) -> None:
        from torchvision.models.feature_extraction import create_feature_extractor  # only when asked for

        _conv_net(model, "fx")
        super().__init__(model, out_indices)
        nodes = {name: str(i) for i, name in enumerate(self.feature_info.module_name())}
        graph = create_feature_extractor(self.model, return_nodes=nodes)
        for name, module in self.model.named_modules():  # the parts the graph does not run (the head)
            parent, _, child = name.rpartition(".")  # stay, so the state dict is the getter's (zoo.save)
            if name and not _has_submodule(graph, name) and _has_submodule(graph, parent):
                graph.get_submodule(parent).add_module(child, module)
        self.model = graph

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Refused: the traced graph has no checkpointing (feature_cls='getter' has)."""
        if enable:
            raise InvalidArgumentError(
                "a feature_cls='fx' extractor is a traced graph without activation "
                "checkpointing; build it with feature_cls='getter' to checkpoint"
            )

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(self.model(x).values())
