"""What each architecture is and can do, declared as data so the registry knows every name
without importing the family modules (``zoo list`` and ``import zoo`` stay light).

`ArchSpec` is the one place a family's traits live: what it reads and which heads it builds
(the same as its ``@register_model`` arguments; ``tests/test_registry.py`` checks they agree),
whether static int8 quantizes it, the head and an example for fine-tuning on its data, and
its twins in timm and Hugging Face. Code elsewhere reads these fields instead of name lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Inputs = Literal["images", "text", "graphs", "vectors"]

_TEXT_HEADS = ("lm", "sequence_classification", "token_classification")
_GRAPH_HEADS = ("graph_classification", "graph_regression", "node_classification")


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


def _family(module: str, names: str, **traits: Any) -> list[ArchSpec]:
    return [ArchSpec(name, module, **traits) for name in names.split()]


_CNN = {"int8": True}
_TIMM = {"int8": True, "timm_checkpoints": True}

ARCHS: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in [
        *_family(
            "resnet",
            "resnet18 resnet34 resnet50 resnet101 resnet152 resnext50_32x4d wide_resnet50_2 seresnet50",
            **_TIMM,
        ),
        *_family("resnet", "resnet56 seresnet20", **_CNN),
        *_family("resnet", "resnet20", **_CNN, finetune_example="resnet20.fmnist"),
        *_family("densenet", "densenet121 densenet161 densenet169 densenet201", **_TIMM),
        *_family("densenet", "densenet_bc_100 densenet_bc_40 sedensenet_bc_100", **_CNN),
        ArchSpec("mobilenet_v1", "mobilenet", int8=True, timm_names={"mobilenetv1_100": {}}),
        ArchSpec(
            "mobilenet_v2",
            "mobilenet",
            int8=True,
            timm_names={
                "mobilenetv2_050": {"width_mult": 0.5},
                "mobilenetv2_100": {},
                "mobilenetv2_140": {"width_mult": 1.4},
            },
        ),
        ArchSpec("mobilenet_v3_large", "mobilenet", int8=True, timm_names={"mobilenetv3_large_100": {}}),
        ArchSpec("mobilenet_v3_small", "mobilenet", int8=True, timm_names={"mobilenetv3_small_100": {}}),
        *_family("mobilenet", "mobilenet_v1_cifar mobilenet_v2_cifar mobilenet_v3_small_cifar", **_CNN),
        ArchSpec(
            "moe_lm",
            "moe_transformer",
            inputs="text",
            heads=_TEXT_HEADS,
            finetune_head="sequence_classification",
            hf_checkpoints=True,
        ),
        ArchSpec(
            "moe_encoder",
            "moe_transformer",
            inputs="text",
            heads=("sequence_classification", "token_classification", "lm"),
            finetune_head="sequence_classification",
            finetune_example="moe_encoder",
            hf_checkpoints=True,
        ),
        ArchSpec("moe_vit", "moe_transformer"),
        ArchSpec("dbn", "dbn", inputs="vectors", finetune_example="dbn.digits"),
        *_family(
            "graph", "gin_sum gin_sopool", inputs="graphs", heads=_GRAPH_HEADS, finetune_head="graph_classification"
        ),
        ArchSpec(
            "gin3",
            "graph",
            inputs="graphs",
            heads=_GRAPH_HEADS,
            finetune_head="graph_classification",
            finetune_example="gin3",
        ),
    ]
}
