"""A model's configuration: `ModelConfig`, built here and nowhere else, and exposed on every
model as the ``pretrained_cfg`` dict that timm's tools read (zoo's keys plus timm's, derived)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from zoo.loading.transforms import IMAGENET_MEAN, IMAGENET_STD, adapt_preprocess
from zoo.store import registry
from zoo.store.registry import WeightInfo


@dataclass(frozen=True)
class ModelConfig:
    """What zoo records about a built model, as timm's ``PretrainedCfg``: enough to build it
    again (architecture, head, options, classes), where its weights came from, and how its
    inputs are preprocessed. `zoo.save` writes it as ``config.json``."""

    architecture: str
    head: str
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None  # an entry name, a file or URL, a Hub reference; None: random
    num_classes: int | None = None
    preprocess: dict[str, Any] = field(default_factory=dict)
    categories: str | None = None  # a class-name list shipped with the weights
    class_names: list[str] | None = None  # class names carried by the model itself (fine-tuned, Hub)
    finetuned_from: str | None = None  # the weights `zoo finetune` started from
    features_only: bool = False
    out_indices: tuple[int, ...] | list[int] | None = None

    @classmethod
    def of(cls, model: nn.Module) -> ModelConfig:
        """The configuration of a model zoo built (its ``pretrained_cfg``, timm's keys left out)."""
        return cls.from_dict(model.pretrained_cfg)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """zoo's ``pretrained_cfg`` keys (class names, origin and feature levels only when set)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for optional in ("class_names", "finetuned_from"):
            if values[optional] is None:
                del values[optional]
        if not self.features_only:
            del values["features_only"], values["out_indices"]
        return values

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}


def set_config(model: nn.Module, config: ModelConfig, extra: dict[str, Any] | None = None) -> nn.Module:
    """Give ``model`` its ``pretrained_cfg``: ``config``'s keys, then ``extra`` (timm's keys)."""
    model.pretrained_cfg = {**config.to_dict(), **(extra or {})}
    return model


def update_config(model: nn.Module, **changes: Any) -> nn.Module:
    """Change fields of ``model``'s configuration, keeping the other keys of its ``pretrained_cfg``."""
    config = ModelConfig.of(model).replace(**changes)
    kept = {k: v for k, v in model.pretrained_cfg.items() if k not in _FIELDS}
    model.pretrained_cfg = {**config.to_dict(), **kept}
    return model


def timm_pretrained_cfg(model: nn.Module, entry: WeightInfo | None) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` keys, with timm's meaning, for a vision model (other models get
    none), so that ``timm.data.resolve_model_data_config(model)`` and ``create_transform``
    reproduce `transforms`: input_size (C, H, W), interpolation, mean, std, crop_pct (crop /
    resize), crop_mode, num_classes, first_conv, classifier, fixed_input_size, pool_size (the
    final map at input_size, for conv nets whose total stride divides it), and for registered
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
    loaded = registry.find_weights(weights)
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
    reduction = model.feature_info[-1]["reduction"]
    if getattr(model.global_pool, "dims", None) == (2, 3) and height % reduction == 0 and width % reduction == 0:
        timm_cfg["pool_size"] = (height // reduction, width // reduction)
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
        imagenet = {"resize": resize, "crop": size, "interpolation": "bilinear", "mean": list(IMAGENET_MEAN),
                    "std": list(IMAGENET_STD)}
        return adapt_preprocess(imagenet, model.in_chans)
    return adapt_preprocess(entry.preprocess, model.in_chans)
