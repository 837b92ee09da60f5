"""A model's configuration: `ModelConfig`, built here and nowhere else, and exposed on every
model as the ``pretrained_cfg`` dict that timm's tools read (zoo's keys, plus timm's keys that
`zoo.loading.pretrained_cfg` derives from them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn


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
    input_format: str | None = None  # what a non-image, non-token model reads, e.g. "smiles/onehot-v1"
    target: dict[str, Any] | None = None  # regression: {"name", "mean", "std"}, folded into the head
    multi_label: dict[str, Any] | None = None  # {"names", "thresholds"}: one per output, probabilities by sigmoid
    label_field: str | None = None  # the column its labels were read from (zoo finetune --label-field)
    max_length: int | None = None  # text: the tokens kept per row in training (zoo finetune --max-length)
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
        for optional in (
            "class_names",
            "finetuned_from",
            "input_format",
            "target",
            "multi_label",
            "label_field",
            "max_length",
        ):
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
