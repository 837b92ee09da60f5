"""`zoo.load`: a name or path resolved to its source, then built with its weights, a new head
on request, and features or optimization on top."""
from __future__ import annotations

import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from zoo.architectures.features import FeatureExtractor
from zoo.deploy import inference
from zoo.devices import checked_device
from zoo.errors import InvalidArgumentError
from zoo.interop import hf_hub, torchvision_weights
from zoo.interop.hf_checkpoint import ARCHITECTURES as HF_ARCHITECTURES
from zoo.interop.hf_checkpoint import CHECKPOINT_FILES, load_pretrained
from zoo.loading.config import timm_pretrained_cfg
from zoo.loading.hub_repo import load_hub
from zoo.loading.saved import CONFIG_FILE, load_saved, saved_folder
from zoo.loading.state_dicts import build_architecture, build_with_state_dict, classifier_keys, read_weights
from zoo.loading.transforms import adapt_preprocess
from zoo.store import registry
from zoo.store.registry import WeightInfo


def load(
    name_or_path: str | os.PathLike,
    *,
    pretrained: bool = True,
    num_classes: int | None = None,
    head: str | None = None,
    weights: str | os.PathLike | Enum | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    optimize: str | None = None,
    example_input: Any = None,
    calibration: Any = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Build a model by name (``resnet50``, ``resnet50.tv_in1k``) or from a directory written
    by `save`, with verified pretrained weights unless ``pretrained=False``.

    ``num_classes`` different from the weights' keeps every body weight and puts a fresh head
    of that size on top; ``weights`` (a local file or URL) replaces the entry's source, and
    torchvision's names for weights (``"IMAGENET1K_V2"``, ``"DEFAULT"``,
    ``"ResNet50_Weights.IMAGENET1K_V1"``, or the enum member) pick the entry holding them;
    ``in_chans`` different from the weights' adapts the first convolution (summed or repeated
    RGB filters). ``features_only=True`` returns a model whose output is the list of feature
    maps at ``out_indices`` (timm's meaning: None all levels, an int n the last n, a sequence
    those levels; see its ``feature_info``). The model is returned in eval mode;
    call ``.train()`` to fine-tune it. ``optimize`` (``"auto"``, ``"fp32"``, ``"bf16"``,
    ``"int8"``) returns it through `zoo.optimize` for inference, timed on ``example_input`` and
    checked (int8: calibrated) on ``calibration``.
    """
    if optimize is None and (example_input is not None or calibration is not None):
        raise InvalidArgumentError("example_input= and calibration= are for optimize=...: pass optimize='auto' "
                                   "(or 'fp32', 'bf16', 'int8'), or leave them out")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0):
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if device is not None:
        device = checked_device(device)
    saved = None if hf_hub.is_hub_name(name_or_path) else saved_folder(name_or_path)
    registered = saved is None and not hf_hub.is_hub_name(name_or_path)
    entry = torchvision_weights.weights_entry(str(name_or_path), weights) if registered else None
    if entry is not None:
        name_or_path, weights, pretrained = entry.name, None, True
    if hf_hub.is_hub_name(name_or_path):
        model = load_hub(hf_hub.parse_hub_name(name_or_path), pretrained, num_classes, head, weights, model_kwargs)
    elif saved is not None:
        model = load_saved(saved, pretrained, head, weights, model_kwargs)
    elif weights is not None and (Path(weights) / CONFIG_FILE).is_file():  # a Hugging Face checkpoint directory
        model = load_pretrained(str(name_or_path), weights, head=head, num_classes=num_classes, dtype=dtype, **model_kwargs)
    elif hf_hub.is_repo_reference(weights) and registry.resolve(str(name_or_path))[0] in HF_ARCHITECTURES:
        repo = hf_hub.parse_repo(weights, f"weights={weights!r}")
        folder = hf_hub.download_snapshot(repo, CHECKPOINT_FILES)
        model = load_pretrained(str(name_or_path), folder, head=head, num_classes=num_classes, dtype=dtype, **model_kwargs)
        model.pretrained_cfg["weights"] = f"{repo.repo_id}@{folder.name}"
    else:
        model = _load_registered(str(name_or_path), pretrained, num_classes, head, weights, model_kwargs)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
        model.pretrained_cfg = {**model.pretrained_cfg, "num_classes": num_classes, "categories": None}
    model.pretrained_cfg = {**model.pretrained_cfg, **timm_pretrained_cfg(model, str(name_or_path))}
    if features_only:
        model = feature_extractor(model, num_classes, out_indices)
    model = model.to(device=device, dtype=dtype).eval()
    if optimize is not None:
        return inference.optimize(model, example_input, optimize, calibration)
    return model


def feature_extractor(
    model: nn.Module, num_classes: int | None, out_indices: int | Sequence[int] | None
) -> nn.Module:
    arch = model.pretrained_cfg["architecture"]
    if num_classes is not None:
        raise ValueError("features_only=True returns feature maps and takes no num_classes")
    if not hasattr(model, "forward_intermediates"):
        raise ValueError(f"{arch} has no feature levels; features_only works for the vision models")
    cfg = model.pretrained_cfg
    extractor = FeatureExtractor(model, out_indices)
    extractor.pretrained_cfg = {
        **cfg, "features_only": True, "out_indices": extractor.out_indices, "num_classes": 0, "categories": None,
    }
    return extractor














def _load_registered(
    name: str,
    pretrained: bool,
    num_classes: int | None,
    head: str | None,
    weights: str | os.PathLike | None,
    model_kwargs: dict[str, Any],
) -> nn.Module:
    arch, entry = registry.resolve(name)
    heads = registry.supported_heads(arch)
    entry_head = entry.model_kwargs.get("head", heads[0]) if entry is not None and pretrained else None
    head = head or model_kwargs.pop("head", None) or entry_head or heads[0]
    if head not in heads:
        raise ValueError(f"{arch} has no head {head!r}; choose one of: {', '.join(heads)}")
    if "." in name and not pretrained and weights is None:
        entry = None  # "arch.tag" with pretrained=False: the architecture only
    use_weights = weights is not None or (pretrained and entry is not None)
    if pretrained and weights is None and entry is None:
        raise registry.no_pretrained_weights(arch)
    kwargs = {**(entry.model_kwargs if entry and use_weights else {}), **model_kwargs}
    if use_weights and weights is None:
        kwargs["num_classes"] = entry.num_classes
    elif num_classes is not None:
        kwargs["num_classes"] = num_classes
    if len(heads) > 1:
        kwargs["head"] = head
    cfg = {
        "architecture": arch,
        "head": head,
        "model_kwargs": {k: v for k, v in kwargs.items() if k != "num_classes"},
        "weights": None,
        "num_classes": None,
        "preprocess": {},
        "categories": None,
    }
    builder = registry.get_builder(arch)
    if not use_weights:
        model = build_architecture(builder, kwargs, arch)
    else:
        state_dict = read_weights(entry, weights)
        new_head = entry_head is not None and head != entry_head and weights is None
        if new_head:  # the body of the weights under another head: their own head is left out
            if num_classes is None:
                raise InvalidArgumentError(f"{name} under head={head!r} needs num_classes=N for its new head")
            kwargs["num_classes"] = num_classes
            with torch.device("meta"):  # what only the weights' own head uses (its classifier, a pooling)
                own = build_architecture(builder, {**kwargs, "head": entry_head, "num_classes": entry.num_classes}, arch)
                target = build_architecture(builder, kwargs, arch)
            dropped = classifier_keys(own) | (own.state_dict().keys() - target.state_dict().keys())
            state_dict = {k: v for k, v in state_dict.items() if k not in dropped}
        model = build_with_state_dict(builder, kwargs, state_dict, num_classes, fresh_head=new_head)
        source = str(weights) if weights is not None else entry.name
        cfg |= {"weights": source}
        if entry is not None:
            preprocess = adapt_preprocess(entry.preprocess, getattr(model, "in_chans", None))
            cfg |= {"preprocess": preprocess, "categories": entry.categories}
    cfg["num_classes"] = model.num_classes
    model.pretrained_cfg = cfg
    return model





































