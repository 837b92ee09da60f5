"""`get_model` and `get_model_weights`, as torchvision.models has them: code written against
torchvision's model registry runs on zoo's, with zoo's verified entries behind each member."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch
import torch.nn as nn

from zoo.interop import torchvision_weights
from zoo.loading import build, transforms
from zoo.store import registry
from zoo.store.registry import WeightInfo


class ModelWeights(Enum):
    """An architecture's weight entries as an enum, like torchvision's ``ResNet50_Weights``:
    members named as torchvision names them (``IMAGENET1K_V2``; zoo's own weights by their tag,
    ``FMNIST``), ``DEFAULT`` among them; each member's value is its zoo entry name."""

    @property
    def info(self) -> WeightInfo:
        """The zoo entry (sha256, converter, preprocessing, ...)."""
        return registry.weight_info(self.value)

    @property
    def url(self) -> str | None:
        """Where the file is published; None for weights shipped inside zoo."""
        return self.info.url

    @property
    def meta(self) -> dict[str, Any]:
        """torchvision's meta keys, filled from the entry. ``_metrics`` keeps zoo's task and metric
        names (``{"imagenet-1k": {"top1": ...}}``); ``_ops`` is GMACs and ``_file_size`` MiB, as in torchvision."""
        info = self.info
        return {
            "categories": info.category_names(),
            "num_params": info.num_params,
            "recipe": info.recipe,
            "license": info.license,
            "_metrics": info.metrics,
            "_ops": info.gmacs,
            "_file_size": None if info.file_size is None else round(info.file_size / 2**20, 3),
            "_docs": info.card,
        }

    def transforms(self) -> Callable[[Any], torch.Tensor]:
        """The eval preprocessing of these weights (see `zoo.transforms`)."""
        return transforms.transforms(self.value)


def get_model_weights(name: str) -> type[ModelWeights]:
    """The weights enum of an architecture (``zoo.get_model_weights("resnet50").IMAGENET1K_V2``),
    the same class for the same entries on every call; ``DEFAULT`` is torchvision's DEFAULT for
    weights republished from torchvision, else zoo's default entry."""
    arch, _ = registry.resolve(name)
    members = torchvision_weights.members(arch)
    if not members:
        raise registry.no_pretrained_weights(arch)
    default = torchvision_weights.default_entry(arch).name
    pairs = tuple((member, info.name) for member, info in members.items()) + ((torchvision_weights.DEFAULT, default),)
    return _weights_enum(torchvision_weights.enum_name(arch), pairs)


@functools.cache
def _weights_enum(class_name: str, members: tuple[tuple[str, str], ...]) -> type[ModelWeights]:
    return ModelWeights(class_name, members, module=__name__)  # DEFAULT becomes an alias: same value


def get_model(name: str, weights: str | os.PathLike | Enum | None = None, **kwargs: Any) -> nn.Module:
    """The architecture ``name`` with ``weights`` (torchvision's names, a zoo enum member, a file
    or a URL), or freshly initialised without; ``kwargs`` go to `zoo.load`. Unlike torchvision
    the model comes back in eval mode; call ``.train()`` to train it."""
    return build.load(name, pretrained=weights is not None, weights=weights, **kwargs)
