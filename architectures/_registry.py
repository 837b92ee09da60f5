"""The table of architecture builders, filled by `register_model` next to each builder.

A leaf, as timm's ``_registry``: model files import it and it imports nothing of zoo, so the
weights side (`zoo.registry`) can read the table without the architectures reading anything back.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch.nn as nn

ModelBuilder = Callable[..., nn.Module]

model_builders: dict[str, ModelBuilder] = {}
model_heads: dict[str, tuple[str, ...]] = {}


def register_model(fn: ModelBuilder | None = None, *, heads: Iterable[str] = ("classification",)):
    """Register a model builder under its function name; use bare or with ``heads=``."""

    def register(builder: ModelBuilder) -> ModelBuilder:
        name = builder.__name__
        if name in model_builders:
            raise ValueError(f"model {name!r} is registered twice")
        model_builders[name] = builder
        model_heads[name] = tuple(heads)
        return builder

    return register(fn) if fn is not None else register
