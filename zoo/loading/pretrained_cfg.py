"""A model's preprocessing as its weights and input channels say (`adapt_preprocess`), and timm's
``pretrained_cfg`` keys derived from a model's `ModelConfig` (zoo.store.model_config)
and its architecture, so that timm's data tools reproduce `zoo.transforms`."""

from __future__ import annotations

import math
from typing import Any

import torch.nn as nn

from zoo.store import weight_entries
from zoo.store.weight_entries import IMAGENET_MEAN, IMAGENET_STD, WeightInfo


def adapt_preprocess(preprocess: dict[str, Any], in_chans: int | None) -> dict[str, Any]:
    """The weights' preprocessing for a model whose first convolution was adapted to
    ``in_chans``: images converted to that many channels (gray, RGB, RGBA), with averaged
    statistics for 1 channel and the weights' statistics repeated for more."""
    if not preprocess or in_chans is None or in_chans == len(preprocess["mean"]):
        return dict(preprocess)
    if in_chans == 1:
        mean, std = (
            [sum(preprocess["mean"]) / len(preprocess["mean"])],
            [sum(preprocess["std"]) / len(preprocess["std"])],
        )
        return {**preprocess, "channels": 1, "mean": mean, "std": std}
    repeat = -(-in_chans // len(preprocess["mean"]))
    mean, std = (preprocess["mean"] * repeat)[:in_chans], (preprocess["std"] * repeat)[:in_chans]
    return {**preprocess, "channels": in_chans, "mean": mean, "std": std}


def timm_pretrained_cfg(model: nn.Module, entry: WeightInfo | None) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` keys, with timm's meaning, for a vision model (other models get
    none), so that ``timm.data.resolve_model_data_config(model)`` and ``create_transform``
    reproduce `transforms`: input_size (C, H, W), interpolation, mean, std, crop_pct (crop /
    resize), crop_mode, num_classes, first_conv, classifier, fixed_input_size, pool_size (the
    final map at input_size, for the conv nets), and for registered
    weights their tag and license. They follow zoo's ``preprocess``; a model without weights gets those of
    the ``entry`` its name resolved to (`_default_preprocess`)."""
    if not hasattr(model, "first_conv") or not hasattr(model, "feature_info"):
        return {}
    cfg = model.pretrained_cfg
    preprocess = cfg.get("preprocess") or _default_preprocess(model, entry)
    # Without a recorded size (trained from scratch at the data's own size), the architecture's default geometry.
    geometry = preprocess if "crop" in preprocess or "resize" in preprocess else _default_preprocess(model, entry)
    crop = geometry.get("crop", geometry.get("resize"))
    height, width = (crop, crop) if isinstance(crop, int) else crop
    resize = geometry.get("resize", min(height, width))
    resize = resize if isinstance(resize, int) else min(resize)  # an exact (H, W) resize: its short side
    crop_pct = min(height, width) / resize
    while math.floor(min(height, width) / crop_pct) < resize:  # timm resizes to floor(crop / crop_pct)
        crop_pct = math.nextafter(crop_pct, 0.0)
    classifier = model.get_classifier()
    weights = cfg.get("weights")
    loaded = weight_entries.find_weights(weights)
    timm_cfg = {
        "input_size": (len(preprocess["mean"]), height, width),
        "interpolation": preprocess.get("interpolation", "bilinear"),
        "mean": tuple(preprocess["mean"]),
        "std": tuple(preprocess["std"]),
        "crop_pct": crop_pct,
        "crop_mode": "center",
        "num_classes": model.num_classes,
        "first_conv": model.first_conv,
        "classifier": next(prefix for prefix, module in model.named_modules() if module is classifier),
        "fixed_input_size": False,
    }
    if loaded is not None:
        timm_cfg |= {"tag": loaded.tag, "license": loaded.license}
    if getattr(model.global_pool, "dims", None) == (2, 3) and hasattr(model, "final_map_size"):
        timm_cfg["pool_size"] = model.final_map_size(height, width)
    return timm_cfg


def _default_preprocess(model: nn.Module, entry: WeightInfo | None) -> dict[str, Any]:
    """The preprocessing of a model built without weights, for its channels: that of the
    ``entry`` its name resolved to (``arch.tag``, or the architecture's default weights), as timm's
    cfg follows the tag whether or not weights load; for an architecture without weights,
    ImageNet's statistics at 224 px (resized to 256) for the nets of total stride 32, and at
    32 px (no resize) for the small-image ones."""
    if entry is None or not entry.preprocess:
        size = 224 if model.feature_info[-1]["reduction"] >= 32 else 32
        resize = 256 if size == 224 else size
        imagenet = {
            "resize": resize,
            "crop": size,
            "interpolation": "bilinear",
            "mean": list(IMAGENET_MEAN),
            "std": list(IMAGENET_STD),
        }
        return adapt_preprocess(imagenet, model.in_chans)
    return adapt_preprocess(entry.preprocess, model.in_chans)
