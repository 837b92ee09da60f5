"""`zoo.load`: a name or path resolved once to its source (`zoo.loading.resolve`), then built
here with its weights, a new head on request, and feature maps or optimization on top.

The walk from the call to the model's first line is kept short on purpose (``docs/layout.md``
counts it): the common case, a registered name, goes load -> resolve -> the registry's lookup
-> `_load_registered` -> the verified weights -> the builder; the other sources (saved folders,
Hub repositories, Hugging Face checkpoints) import their modules only when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import Enum
from typing import Any

import torch
import torch.nn as nn

from zoo.architectures import features
from zoo.bounds import count
from zoo.devices import checked_device
from zoo.errors import InvalidArgumentError
from zoo.loading.pretrained_cfg import adapt_preprocess, timm_pretrained_cfg
from zoo.loading.resolve import HFCheckpoint, HubRepository, Registered, SavedFolder, Source, resolve
from zoo.loading.state_dicts import build_architecture, build_with_state_dict, classifier_keys, read_weights
from zoo.store import weight_entries
from zoo.store.model_config import ModelConfig, set_config, update_config

FEATURE_OPTIONS = ("out_indices", "feature_cls")  # timm's create_model takes them among its kwargs, as here
OPTIMIZE_OPTIONS = ("example_input", "calibration")
NUM_CLASSES = count(1, 1_000_000)  # a head's outputs: ImageNet-21k has 21,843; refused before anything is built


def load(
    name_or_path: str | os.PathLike | Source,
    *,
    pretrained: bool = True,
    num_classes: int | None = None,
    weights: str | os.PathLike | Enum | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    features_only: bool = False,
    optimize: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a model by name (``resnet50``, ``resnet50.tv_in1k``), from a directory written by
    `save`, a Hub repository (``hf-hub:ORG/REPO``) or a source `resolve` returned, with verified
    pretrained weights unless ``pretrained=False``.

    ``num_classes`` different from the weights' keeps every body weight and puts a fresh head
    of that size on top; ``weights`` (a local file or URL) replaces the entry's source, and
    torchvision's names for weights (``"IMAGENET1K_V2"``, ``"DEFAULT"``,
    ``"ResNet50_Weights.IMAGENET1K_V1"``, or the enum member) pick the entry holding them.
    Other keywords go to the architecture's builder, as in timm's ``create_model``: ``head=``
    (``"lm"``, ``"graph_regression"``...), ``in_chans`` different from the weights' (the first
    convolution adapted: summed or repeated RGB filters), the family's options.
    ``features_only=True`` returns a model whose output is the list of feature maps at
    ``out_indices=`` (timm's meaning: None all levels, an int n the last n, a sequence those
    levels; see its ``feature_info``), extracted as timm's ``feature_cls=`` says ("getter", the
    default, "hook" or "fx": the same maps). The model is returned in eval mode; call
    ``.train()`` to fine-tune it. ``optimize`` (``"auto"``, ``"fp32"``, ``"bf16"``, ``"int8"``)
    returns it through `zoo.optimize` for inference, timed on ``example_input=`` and checked
    (int8: calibrated) on ``calibration=``.
    """
    feature_options = {k: kwargs.pop(k) for k in FEATURE_OPTIONS if k in kwargs}
    optimize_options = {k: kwargs.pop(k) for k in OPTIMIZE_OPTIONS if k in kwargs}
    if num_classes is not None or dtype is not None or feature_options or optimize_options:
        _check_arguments(num_classes, dtype, features_only, feature_options, optimize, optimize_options)
    source = resolve(name_or_path, weights)
    if isinstance(source, Registered):
        model = _load_registered(source, pretrained or source.named_by_weights, num_classes, kwargs)
    else:
        model = _load_other(source, pretrained, num_classes, weights, dtype, kwargs)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
        update_config(model, num_classes=num_classes, categories=None, target=None)  # a new head: no old meaning
    entry = source.entry if isinstance(source, Registered) else None
    model.pretrained_cfg = {**model.pretrained_cfg, **timm_pretrained_cfg(model, entry)}
    if features_only:
        model = features_only_model(model, **feature_options)
    model = model.to(device=None if device is None else checked_device(device), dtype=dtype).eval()
    if optimize is not None:
        from zoo.deploy import inference  # the optimizer's compiler stack only when asked for

        return inference.optimize(
            model, optimize_options.get("example_input"), optimize, optimize_options.get("calibration")
        )
    return model


def _check_arguments(
    num_classes: Any, dtype: Any, features_only: bool, feature_options: dict, optimize: Any, optimize_options: dict
) -> None:
    if optimize is None and optimize_options:
        raise InvalidArgumentError(
            "example_input= and calibration= are for optimize=...: pass optimize='auto' "
            "(or 'fp32', 'bf16', 'int8'), or leave them out"
        )
    if feature_options.get("feature_cls") is not None and not features_only:
        raise InvalidArgumentError(
            f"feature_cls={feature_options['feature_cls']!r} says how to extract feature maps: "
            "pass features_only=True with it"
        )
    if features_only and num_classes is not None:
        raise InvalidArgumentError("features_only=True returns feature maps and takes no num_classes")
    if num_classes is not None and NUM_CLASSES.problem(num_classes):
        raise InvalidArgumentError(
            f"num_classes must be a positive integer, at most {NUM_CLASSES.high:,} (a head of that many "
            f"outputs), got {num_classes!r}"
        )
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"dtype must be a torch.dtype such as torch.float16, got {dtype!r}")


def _load_other(
    source: Source, pretrained: bool, num_classes: int | None, weights: Any, dtype: Any, kwargs: dict[str, Any]
) -> nn.Module:
    """A saved folder, a Hub repository or a Hugging Face checkpoint: each imports its own reader."""
    head = kwargs.pop("head", None)
    if isinstance(source, SavedFolder):
        from zoo.loading.saved import load_saved

        return load_saved(source.path, pretrained=pretrained, head=head, weights=weights, model_kwargs=kwargs)
    if isinstance(source, HubRepository):
        from zoo.loading.hub_repo import load_hub

        return load_hub(
            source.repo, pretrained=pretrained, num_classes=num_classes, head=head, weights=weights, model_kwargs=kwargs
        )
    assert isinstance(source, HFCheckpoint)  # internal: Source has four kinds
    return _load_hf_checkpoint(source, num_classes, head, dtype, kwargs)


def _load_hf_checkpoint(
    source: HFCheckpoint, num_classes: int | None, head: str | None, dtype: Any, kwargs: dict[str, Any]
) -> nn.Module:
    from zoo.interop import hf_hub
    from zoo.interop.hf_checkpoint import CHECKPOINT_FILES, load_pretrained

    folder = source.folder
    if folder is None:
        folder = hf_hub.download_snapshot(source.repo, CHECKPOINT_FILES)
    model = load_pretrained(source.arch, folder, head=head, num_classes=num_classes, dtype=dtype, **kwargs)
    if source.repo is not None:
        update_config(model, weights=f"{source.repo.repo_id}@{folder.name}")
    return model


def features_only_model(
    model: nn.Module, out_indices: int | Sequence[int] | None = None, feature_cls: str | None = None
) -> nn.Module:
    """``model``'s feature maps at ``out_indices``, extracted as timm's ``feature_cls`` names
    ("getter", the default; "hook"; "fx": see `zoo.architectures.features.feature_extractor`)."""
    arch = model.pretrained_cfg["architecture"]
    if not hasattr(model, "forward_intermediates"):
        raise InvalidArgumentError(f"{arch} has no feature levels; features_only works for the vision models")
    extractor = features.feature_extractor(model, out_indices, feature_cls)
    extractor.pretrained_cfg = dict(model.pretrained_cfg)
    return update_config(
        extractor, features_only=True, out_indices=extractor.out_indices, num_classes=0, categories=None
    )


def _load_registered(
    source: Registered, pretrained: bool, num_classes: int | None, kwargs: dict[str, Any]
) -> nn.Module:
    """A registered architecture, with its entry's weights (or ``weights=``) unless ``pretrained=False``."""
    arch, weights = source.arch, source.weights
    heads = weight_entries.find_spec(arch).heads
    entry_head = source.entry.model_kwargs.get("head", heads[0]) if source.entry is not None and pretrained else None
    head = kwargs.pop("head", None) or entry_head or heads[0]
    if head not in heads:
        raise InvalidArgumentError(f"{arch} has no head {head!r}; choose one of: {', '.join(heads)}")
    entry = None if "." in source.name and not pretrained and weights is None else source.entry
    use_weights = weights is not None or (pretrained and entry is not None)
    if pretrained and weights is None and entry is None:
        raise weight_entries.no_pretrained_weights(arch)
    kwargs = {**(entry.model_kwargs if entry and use_weights else {}), **kwargs}
    if use_weights and weights is None:
        kwargs["num_classes"] = entry.num_classes
    elif num_classes is not None:
        kwargs["num_classes"] = num_classes
    if len(heads) > 1:
        kwargs["head"] = head
    config = ModelConfig(arch, head, {k: v for k, v in kwargs.items() if k != "num_classes"})
    builder = weight_entries.model_builders.get(arch) or weight_entries.get_builder(arch)
    if not use_weights:
        model = build_architecture(builder, kwargs, arch)
    else:
        new_head = entry_head is not None and head != entry_head and weights is None
        state_dict = read_weights(source.entry, weights)
        if new_head:
            state_dict = _without_own_head(source, kwargs, head, entry_head, num_classes, state_dict)
        model = build_with_state_dict(builder, kwargs, state_dict, num_classes, fresh_head=new_head)
        config = config.replace(weights=weights if weights is not None else entry.name)
        if entry is not None:
            preprocess = adapt_preprocess(entry.preprocess, getattr(model, "in_chans", None))
            config = config.replace(preprocess=preprocess, categories=entry.categories)
            if weights is None and entry.input_format:  # molecules (zoo.loading.smiles); a new head has no target
                config = config.replace(input_format=entry.input_format, target=None if new_head else entry.target)
    return set_config(model, config.replace(num_classes=model.num_classes))


def _without_own_head(
    source: Registered,
    kwargs: dict[str, Any],
    head: str,
    entry_head: str,
    num_classes: int | None,
    state_dict: dict[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """The weights without what only their own head uses, for a model built under another head."""
    if num_classes is None:
        raise InvalidArgumentError(f"{source.name} under head={head!r} needs num_classes=N for its new head")
    kwargs["num_classes"] = num_classes
    builder = weight_entries.get_builder(source.arch)
    with torch.device("meta"):  # what only the weights' own head uses (its classifier, a pooling)
        own = build_architecture(
            builder, {**kwargs, "head": entry_head, "num_classes": source.entry.num_classes}, source.arch
        )
        target = build_architecture(builder, kwargs, source.arch)
    dropped = classifier_keys(own) | (own.state_dict().keys() - target.state_dict().keys())
    return {k: v for k, v in state_dict.items() if k not in dropped}
