"""The table of architecture builders, filled by `register_model` next to each builder.

A leaf, as timm's ``_registry``: model files import it and it imports nothing of zoo, so the
weights side (`zoo.store.registry`) can read the table without the architectures reading
anything back. The zoo's own architectures are also declared in `_families.ARCHS`, which the
registry reads without importing the family modules; `register_model` records what a module
actually registers (for user models it is the only record).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._families import ArchSpec, Inputs

ModelBuilder = Callable[..., Any]  # returns an nn.Module; torch is not imported here, to keep `zoo list` light

model_builders: dict[str, ModelBuilder] = {}
registered_specs: dict[str, ArchSpec] = {}  # what register_model was told, by name


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
        module = builder.__module__.removeprefix("zoo.architectures.")
        registered_specs[name] = ArchSpec(name, module, inputs=inputs, heads=tuple(heads))
        return builder

    return register(fn) if fn is not None else register
