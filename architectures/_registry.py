"""The table of architecture builders, filled by `register_model` next to each builder.

A leaf, as timm's ``_registry``: model files import it and it imports nothing of zoo, so the
weights side (`zoo.store.registry`) can read the table without the architectures reading anything back.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import torch.nn as nn

ModelBuilder = Callable[..., nn.Module]
Inputs = Literal["images", "text", "graphs", "vectors"]

model_builders: dict[str, ModelBuilder] = {}
model_heads: dict[str, tuple[str, ...]] = {}
model_inputs: dict[str, Inputs] = {}


def register_model(
    fn: ModelBuilder | None = None, *, heads: Iterable[str] = ("classification",), inputs: Inputs = "images"
):
    """Register a model builder under its function name; use bare or with ``heads=`` (the heads
    it can be built with, default first) and ``inputs=`` (what it reads: images (N, C, H, W),
    token ids (N, L), PyG graph batches, or feature vectors (N, D))."""

    def register(builder: ModelBuilder) -> ModelBuilder:
        name = builder.__name__
        if name in model_builders:
            raise ValueError(f"model {name!r} is registered twice")
        model_builders[name] = builder
        model_heads[name] = tuple(heads)
        model_inputs[name] = inputs
        return builder

    return register(fn) if fn is not None else register
