"""`zoo.load`: a name or path resolved once to its source (`zoo.loading.resolve`), then built
here with its weights, a new head on request, and feature maps or optimization on top."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.nn as nn

from zoo.architectures import features
from zoo.devices import checked_device
from zoo.errors import InvalidArgumentError
from zoo.interop import hf_hub
from zoo.interop.hf_checkpoint import CHECKPOINT_FILES, load_pretrained
from zoo.loading.config import timm_pretrained_cfg
from zoo.loading.hub_repo import load_hub
from zoo.loading.resolve import HFCheckpoint, HubRepository, Registered, SavedFolder, Source, resolve
from zoo.loading.saved import load_saved
from zoo.loading.state_dicts import build_architecture, build_with_state_dict, classifier_keys, read_weights
from zoo.loading.transforms import adapt_preprocess
from zoo.store import registry
from zoo.store.model_config import ModelConfig, set_config, update_config


@dataclass
class LoadOptions:
    """What `load` was asked for, passed on to the source's builder as one object."""

    pretrained: bool = True
    num_classes: int | None = None
    head: str | None = None
    weights: str | os.PathLike | Enum | None = None
    dtype: torch.dtype | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)


def load(
    name_or_path: str | os.PathLike | Source,
    *,
    pretrained: bool = True,
    num_classes: int | None = None,
    head: str | None = None,
    weights: str | os.PathLike | Enum | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    feature_cls: str | None = None,
    optimize: str | None = None,
    example_input: Any = None,
    calibration: Any = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Build a model by name (``resnet50``, ``resnet50.tv_in1k``), from a directory written by
    `save`, a Hub repository (``hf-hub:ORG/REPO``) or a source `resolve` returned, with verified
    pretrained weights unless ``pretrained=False``.

    ``num_classes`` different from the weights' keeps every body weight and puts a fresh head
    of that size on top; ``weights`` (a local file or URL) replaces the entry's source, and
    torchvision's names for weights (``"IMAGENET1K_V2"``, ``"DEFAULT"``,
    ``"ResNet50_Weights.IMAGENET1K_V1"``, or the enum member) pick the entry holding them;
    ``in_chans`` different from the weights' adapts the first convolution (summed or repeated
    RGB filters). ``features_only=True`` returns a model whose output is the list of feature
    maps at ``out_indices`` (timm's meaning: None all levels, an int n the last n, a sequence
    those levels; see its ``feature_info``), extracted as timm's ``feature_cls`` says ("getter",
    the default, "hook" or "fx": the same maps). The model is returned in eval mode;
    call ``.train()`` to fine-tune it. ``optimize`` (``"auto"``, ``"fp32"``, ``"bf16"``,
    ``"int8"``) returns it through `zoo.optimize` for inference, timed on ``example_input`` and
    checked (int8: calibrated) on ``calibration``.
    """
    _check_arguments(num_classes, optimize, example_input, calibration, dtype)
    if feature_cls is not None and not features_only:
        raise InvalidArgumentError(
            f"feature_cls={feature_cls!r} says how to extract feature maps: pass features_only=True with it"
        )
    device = None if device is None else checked_device(device)
    source = resolve(name_or_path, weights)
    named = isinstance(source, Registered) and source.named_by_weights
    options = LoadOptions(pretrained or named, num_classes, head, weights, dtype, model_kwargs)
    model = build(source, options)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
        update_config(model, num_classes=num_classes, categories=None)
    entry = source.entry if isinstance(source, Registered) else None
    model.pretrained_cfg = {**model.pretrained_cfg, **timm_pretrained_cfg(model, entry)}
    if features_only:
        model = feature_extractor(model, num_classes, out_indices, feature_cls)
    model = model.to(device=device, dtype=dtype).eval()
    if optimize is not None:
        from zoo.deploy import inference  # the optimizer's compiler stack only when asked for

        return inference.optimize(model, example_input, optimize, calibration)
    return model


def _check_arguments(num_classes: Any, optimize: str | None, example_input: Any, calibration: Any, dtype: Any) -> None:
    if optimize is None and (example_input is not None or calibration is not None):
        raise InvalidArgumentError(
            "example_input= and calibration= are for optimize=...: pass optimize='auto' "
            "(or 'fp32', 'bf16', 'int8'), or leave them out"
        )
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0
    ):
        raise InvalidArgumentError(f"num_classes must be a positive integer, got {num_classes!r}")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"dtype must be a torch.dtype such as torch.float16, got {dtype!r}")


def build(source: Source, options: LoadOptions) -> nn.Module:
    """The model of a resolved source, with the weights ``options`` ask for (the one build path)."""
    o = options
    if isinstance(source, HubRepository):
        return load_hub(source.repo, o.pretrained, o.num_classes, o.head, o.weights, o.model_kwargs)
    if isinstance(source, SavedFolder):
        return load_saved(source.path, o.pretrained, o.head, o.weights, o.model_kwargs)
    if isinstance(source, HFCheckpoint):
        return _load_hf_checkpoint(source, o)
    return _load_registered(source, o)


def _load_hf_checkpoint(source: HFCheckpoint, o: LoadOptions) -> nn.Module:
    folder = source.folder
    if folder is None:
        folder = hf_hub.download_snapshot(source.repo, CHECKPOINT_FILES)
    model = load_pretrained(
        source.arch, folder, head=o.head, num_classes=o.num_classes, dtype=o.dtype, **o.model_kwargs
    )
    if source.repo is not None:
        update_config(model, weights=f"{source.repo.repo_id}@{folder.name}")
    return model


def feature_extractor(
    model: nn.Module, num_classes: int | None, out_indices: int | Sequence[int] | None, feature_cls: str | None = None
) -> nn.Module:
    """``model``'s feature maps at ``out_indices``, extracted as timm's ``feature_cls`` names
    ("getter", the default; "hook"; "fx": see `zoo.architectures.features.feature_extractor`)."""
    arch = model.pretrained_cfg["architecture"]
    if num_classes is not None:
        raise InvalidArgumentError("features_only=True returns feature maps and takes no num_classes")
    if not hasattr(model, "forward_intermediates"):
        raise InvalidArgumentError(f"{arch} has no feature levels; features_only works for the vision models")
    extractor = features.feature_extractor(model, out_indices, feature_cls)
    extractor.pretrained_cfg = dict(model.pretrained_cfg)
    return update_config(
        extractor, features_only=True, out_indices=extractor.out_indices, num_classes=0, categories=None
    )


def _registered_head(source: Registered, o: LoadOptions) -> tuple[str, str | None]:
    """The head to build, and the head the entry's weights were trained with (None: no weights)."""
    heads = registry.supported_heads(source.arch)
    entry = source.entry
    entry_head = entry.model_kwargs.get("head", heads[0]) if entry is not None and o.pretrained else None
    head = o.head or o.model_kwargs.pop("head", None) or entry_head or heads[0]
    if head not in heads:
        raise InvalidArgumentError(f"{source.arch} has no head {head!r}; choose one of: {', '.join(heads)}")
    return head, entry_head


def _load_registered(source: Registered, o: LoadOptions) -> nn.Module:
    arch, weights = source.arch, source.weights
    head, entry_head = _registered_head(source, o)
    entry = None if "." in source.name and not o.pretrained and weights is None else source.entry
    use_weights = weights is not None or (o.pretrained and entry is not None)
    if o.pretrained and weights is None and entry is None:
        raise registry.no_pretrained_weights(arch)
    kwargs = {**(entry.model_kwargs if entry and use_weights else {}), **o.model_kwargs}
    if use_weights and weights is None:
        kwargs["num_classes"] = entry.num_classes
    elif o.num_classes is not None:
        kwargs["num_classes"] = o.num_classes
    if len(registry.supported_heads(arch)) > 1:
        kwargs["head"] = head
    config = ModelConfig(arch, head, {k: v for k, v in kwargs.items() if k != "num_classes"})
    builder = registry.get_builder(arch)
    if not use_weights:
        model = build_architecture(builder, kwargs, arch)
    else:
        new_head = entry_head is not None and head != entry_head and weights is None
        state_dict = _weights_for_head(source, kwargs, head, entry_head, o.num_classes, new_head)
        model = build_with_state_dict(builder, kwargs, state_dict, o.num_classes, fresh_head=new_head)
        config = config.replace(weights=weights if weights is not None else entry.name)
        if entry is not None:
            preprocess = adapt_preprocess(entry.preprocess, getattr(model, "in_chans", None))
            config = config.replace(preprocess=preprocess, categories=entry.categories)
    return set_config(model, config.replace(num_classes=model.num_classes))


def _weights_for_head(
    source: Registered,
    kwargs: dict[str, Any],
    head: str,
    entry_head: str | None,
    num_classes: int | None,
    new_head: bool,
) -> dict[str, torch.Tensor]:
    """The weights' state dict; under another head than theirs, without what only their head uses."""
    state_dict = read_weights(source.entry, source.weights)
    if not new_head:
        return state_dict
    if num_classes is None:
        raise InvalidArgumentError(f"{source.name} under head={head!r} needs num_classes=N for its new head")
    kwargs["num_classes"] = num_classes
    builder = registry.get_builder(source.arch)
    with torch.device("meta"):  # what only the weights' own head uses (its classifier, a pooling)
        own = build_architecture(
            builder, {**kwargs, "head": entry_head, "num_classes": source.entry.num_classes}, source.arch
        )
        target = build_architecture(builder, kwargs, source.arch)
    dropped = classifier_keys(own) | (own.state_dict().keys() - target.state_dict().keys())
    return {k: v for k, v in state_dict.items() if k not in dropped}
