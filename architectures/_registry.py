"""The one declaration of every architecture: `register_model` next to its builder, with the
family traits (what it reads, its heads, int8, its twins in timm and Hugging Face...).

A leaf, as timm's ``_registry``: model files import it and it imports nothing of zoo, so the
weights side (`zoo.store.weight_entries`) can read the table without the architectures reading
anything back. So that ``zoo list`` and ``import zoo`` know every name without importing torch
or a family, `ARCHS` is read from ``_index.json``, which is derived from the decorators
(`write_index` writes it; ``tests/test_registry.py`` checks it is
current), never edited by hand.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from ._errors import InvalidArgumentError

Inputs = Literal["images", "text", "graphs", "vectors"]
ModelBuilder = Callable[..., Any]  # returns an nn.Module; torch is not imported here, to keep `zoo list` light
INDEX_FILE = Path(__file__).with_name("_index.json")
FAMILIES = ("resnet", "densenet", "mobilenet", "moe.moe_transformer", "dbn", "graph")  # zoo's family modules


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: its builder's name, the family module that registers it, and its traits."""

    name: str
    module: str  # zoo.architectures.<module> registers the builder
    inputs: Inputs = "images"  # images (N, C, H, W), token ids (N, L), PyG graph batches, vectors (N, D)
    heads: tuple[str, ...] = ("classification",)  # the heads it can be built with, default first
    int8: bool = False  # static int8 post-training quantization (PT2E, x86) applies: a CNN
    finetune_head: str | None = None  # the head `zoo finetune` picks for data of its kind
    finetune_example: str | None = None  # a name that fine-tunes on data of its kind, for error hints
    timm_checkpoints: bool = False  # timm's model of the same name has the same state dict (hf-hub timm repos)
    timm_names: dict[str, dict[str, Any]] = field(default_factory=dict)  # timm's other names -> options
    hf_checkpoints: bool = False  # loads and exports Hugging Face Mixtral-format MoE checkpoints


model_builders: dict[str, ModelBuilder] = {}
registered_specs: dict[str, ArchSpec] = {}  # what register_model was told, by name


def register_model(fn: ModelBuilder | None = None, *, heads: Iterable[str] = ("classification",), **traits: Any):
    """Register a model builder under its function name; use bare or with its traits as keywords
    (`ArchSpec`'s fields: ``heads=`` the heads it can be built with, default first; ``inputs=``
    what it reads: images (N, C, H, W), token ids (N, L), PyG graph batches, or vectors (N, D))."""
    unknown = set(traits) - {f.name for f in dataclasses.fields(ArchSpec)} - {"name", "module"}
    if unknown:
        raise InvalidArgumentError(f"register_model got unknown traits {sorted(unknown)}; see ArchSpec's fields")
    if traits.get("inputs", "images") not in get_args(Inputs):
        raise InvalidArgumentError(f"register_model(inputs=...) is one of {get_args(Inputs)}, got {traits['inputs']!r}")
    heads = tuple(heads) if not isinstance(heads, str) else (heads,)
    if not heads or not all(isinstance(h, str) and h for h in heads):
        raise InvalidArgumentError(f"register_model(heads=...) names at least one head, default first; got {heads!r}")

    def register(builder: ModelBuilder) -> ModelBuilder:
        name = builder.__name__
        if name in model_builders:
            raise InvalidArgumentError(f"model {name!r} is registered twice")
        model_builders[name] = builder
        module = builder.__module__.removeprefix("zoo.architectures.")
        registered_specs[name] = ArchSpec(name, module, heads=tuple(heads), **traits)
        return builder

    return register(fn) if fn is not None else register


def read_index() -> dict[str, ArchSpec]:
    """zoo's own architectures as their decorators declare them, from the derived index."""
    rows = json.loads(INDEX_FILE.read_text())
    return {row["name"]: ArchSpec(**{**row, "heads": tuple(row["heads"])}) for row in rows}


def derive_index() -> list[dict[str, Any]]:
    """The index's rows: every family module imported, each builder's recorded spec."""
    for family in FAMILIES:
        importlib.import_module(f"{__package__}.{family}")
    specs = [s for s in registered_specs.values() if s.module in FAMILIES]
    return [dataclasses.asdict(s) for s in sorted(specs, key=lambda s: s.name)]


def write_index() -> Path:
    """Write ``_index.json`` anew from the decorators (after adding or changing an architecture)."""
    INDEX_FILE.write_text(json.dumps(derive_index(), indent=1) + "\n")
    return INDEX_FILE
