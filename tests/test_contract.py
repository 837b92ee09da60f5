"""The model contract (README, "The model contract") for every registered architecture and
each of its heads, read from the registry: an architecture is tested the day it is registered.

Each case builds its model once (a module-scoped fixture: pytest runs a case's tests together,
then drops the model), small where its family has size options (`_small_kwargs`, a rule on
the registry entry, never a list of names), and makes its input from what the architecture
registered that it reads and what the model says about itself (`_make_input`: image channels
and strides, vocabulary, graph features, visible units). The classifier resets run on a deep
copy; the training steps run on the model itself, whose buffers and modes are put back. The
file runs on one thread.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import typing
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import erdos_renyi_graph

import zoo
from zoo.architectures.graph import AddTriangles
from zoo.architectures.resnet import ResNet

BATCH = 2  # images, sequences, visible vectors; the graph batch has 3 graphs
SEQ_LEN = 6
GRAPH_SIZES = (6, 8, 7)

# Heads documented to give one output per token (MoETransformer: "per-token logits (N, L, C)
# for lm and token_classification") or per node (GIN: node_classification skips the readout);
# every other head pools, giving one output row per item of the batch.
TOKEN_HEADS = ("lm", "token_classification")
NODE_HEADS = ("node_classification",)

CASES = [(arch, head) for arch in zoo.list_models() for head in zoo.store.weight_entries.supported_heads(arch)]
IDS = [arch if len(zoo.store.weight_entries.supported_heads(arch)) == 1 else f"{arch}-{head}" for arch, head in CASES]


@dataclass
class Case:
    arch: str
    head: str
    model: nn.Module  # as built, in eval mode; a test that changes it restores it or works on a copy
    kind: str  # what it reads: "images", "text", "graphs" or "vectors" (zoo.store.weight_entries.input_kind)
    x: Any
    rows: tuple[int, ...]  # the leading dimensions of every output: (N,), (N, L) or (num_nodes,)
    _memo: dict[str, Any] = dataclasses.field(default_factory=dict)

    def output(self) -> Any:
        """``model(x)`` in eval mode, computed once for the case's tests."""
        if "output" not in self._memo:
            with torch.no_grad():
                self._memo["output"] = self.model(self.x)
        return self._memo["output"]

    def features(self) -> Any:
        """``model.forward_features(x)`` in eval mode, computed once for the case's tests."""
        if "features" not in self._memo:
            with torch.no_grad():
                self._memo["features"] = self.model.forward_features(self.x)
        return self._memo["features"]


def _model_class(arch: str) -> type | None:
    """The class the architecture's builder is annotated to return (None without one)."""
    cls = typing.get_type_hints(zoo.store.weight_entries.get_builder(arch)).get("return")
    return cls if isinstance(cls, type) else None


def _small_kwargs(arch: str) -> dict[str, Any]:
    """Size options that keep a family fast, chosen by a rule on the registry entry (what it
    reads, its builder's signature and the class it returns), never by name: the MoE
    transformers (forward takes ``return_aux``) get 2 layers of width 32 with 4 experts, top-2,
    so the routed path runs; the DBN (reads vectors, builder takes ``sizes``) 3 small layers;
    the GINs (read graphs) 2 layers of 16 channels; the ImageNet-width ResNets a quarter of
    their stage widths (``stage_channels``: the same blocks, depths, strides and feature
    levels; their time here goes into weight-sized work, not into the input's size, and at full
    width resnet152 and wide_resnet50_2 alone took about 10 s of the file's time). The other
    CNNs are built as they are, densenet201 included."""
    cls = _model_class(arch)
    if cls is not None and "return_aux" in inspect.signature(cls.forward).parameters:
        return dict(
            hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=24, num_experts=4, top_k=2
        )
    kind = zoo.store.weight_entries.input_kind(arch)
    if kind == "vectors" and "sizes" in inspect.signature(zoo.store.weight_entries.get_builder(arch)).parameters:
        return dict(sizes=(36, 24, 16))
    if kind == "graphs":
        return dict(hidden_channels=16, num_layers=2)
    if cls is not None and issubclass(cls, ResNet):
        with torch.device("meta"):  # no weights: only its stage widths are read
            probe = zoo.load(arch, pretrained=False)
        expansion = type(getattr(probe, probe.stage_names[0])[0]).expansion
        widths = [info["num_chs"] // expansion for info in probe.feature_info[1:]]
        if widths[0] >= 64:
            return dict(stage_channels=tuple(w // 4 for w in widths))
    return {}


def _kind(arch: str, model: nn.Module) -> str:
    """What the architecture reads, as it registered it (``register_model(inputs=...)``)."""
    kind = zoo.store.weight_entries.input_kind(arch)
    if kind == "images":  # vision models have feature levels, which say the strides
        assert hasattr(model, "feature_info") and hasattr(model, "in_chans"), f"{arch} reads images"
    assert kind in ("images", "text", "graphs", "vectors"), f"{arch} reads {kind!r}: teach _make_input it"
    return kind


def _image_size(model: nn.Module) -> tuple[int, int]:
    """Height and width: 1 and 2 times the deepest feature level's stride (at least the
    model's minimum input size), the smallest input on which every level has an exact,
    non-square size (a 1 x 2 map at the deepest level; 32 x 64 for the ImageNet nets, which
    keeps resnet152 and densenet201 fast). Without weights ``pretrained_cfg`` carries no
    preprocessing, so the size comes from the model's feature_info and min_input_size."""
    stride = max(max(info["reduction"] for info in model.feature_info), getattr(model, "min_input_size", 1))
    return stride, 2 * stride


def _graph_batch(in_channels: int, extra_channels: int = 0) -> Batch:
    graphs = []
    for n in GRAPH_SIZES:
        edge_index = erdos_renyi_graph(n, 0.5)
        x = torch.randn(n, in_channels + extra_channels)
        graphs.append(AddTriangles()(Data(x=x, edge_index=edge_index, num_nodes=n)))
    return Batch.from_data_list(graphs)


def _make_input(model: nn.Module, kind: str) -> Any:
    if kind == "images":
        return torch.randn(BATCH, model.in_chans, *_image_size(model))
    if kind == "text":  # token ids (N, L)
        return torch.randint(0, model.config.vocab_size, (BATCH, SEQ_LEN))
    if kind == "graphs":  # a torch_geometric Batch with the triangles gin3 reads
        return _graph_batch(model.in_channels)
    return torch.rand(BATCH, model.sizes[0])  # vectors: the DBN's visible units, in [0, 1]


def _wrong_input(case: Case) -> Any:
    """An input of the wrong shape for the model."""
    if case.kind in ("images", "text"):
        return case.x[0]  # no batch dimension
    if case.kind == "graphs":
        return _graph_batch(case.model.in_channels, extra_channels=1)  # wrong feature width
    return case.x[:, :-1]  # one visible unit short


def _rows(head: str, kind: str, x: Any) -> tuple[int, ...]:
    if head in TOKEN_HEADS:
        return tuple(x.shape)  # (N, L)
    if head in NODE_HEADS:
        return (x.num_nodes,)
    if kind == "graphs":
        return (x.num_graphs,)
    return (x.shape[0],)


def _has_aux(model: nn.Module) -> bool:
    """Models with routing losses (the MoE family) take return_aux=True."""
    return "return_aux" in inspect.signature(model.forward).parameters


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest) -> Case:
    arch, head = request.param
    torch.manual_seed(0)
    model = zoo.load(arch, pretrained=False, head=head, **_small_kwargs(arch))
    kind = _kind(arch, model)
    x = _make_input(model, kind)
    return Case(arch, head, model, kind, x, _rows(head, kind, x))


# --- the tests ---------------------------------------------------------------------------


def test_output_is_a_tensor(case: Case) -> None:
    model = case.model
    assert not model.training  # zoo.load returns eval mode
    out = case.output()
    assert isinstance(out, torch.Tensor), f"{case.arch}: model(x) returned {type(out).__name__}"
    assert out.shape == (*case.rows, model.num_classes)  # batch dimension first
    assert torch.isfinite(out).all()

    assert isinstance(model.num_features, int) and not isinstance(model.num_features, bool)
    assert model.num_features > 0
    assert isinstance(model.num_classes, int) and model.num_classes > 0
    cfg = model.pretrained_cfg
    assert isinstance(cfg, dict) and cfg["architecture"] == case.arch and cfg["head"] == case.head

    if _has_aux(model):  # MoE: logits by default, an MoEOutput with the routing losses on request
        with torch.no_grad():
            aux = model(case.x, return_aux=True)
        assert not isinstance(aux, torch.Tensor)
        torch.testing.assert_close(aux.logits, out)
        assert aux.aux_loss.ndim == 0 and torch.isfinite(aux.aux_loss)
        assert aux.expert_fractions.shape[-1] == model.config.num_experts


def test_forward_features_and_head(case: Case) -> None:
    model = case.model
    features = case.features()
    assert isinstance(features, torch.Tensor) and features.shape[0] == case.rows[0]
    with torch.no_grad():
        pooled = model.forward_head(features, pre_logits=True)
        # pre_logits: the (pooled) features the final Linear reads, as timm's: head_hidden_size
        # wide where there is one (MobileNetV3: after its hidden layer), else num_features
        width = getattr(model, "head_hidden_size", model.num_features)
        assert isinstance(pooled, torch.Tensor) and pooled.shape == (*case.rows, width)
        torch.testing.assert_close(model.forward_head(features), case.output())


def test_classifier_reset(case: Case) -> None:
    assert isinstance(case.model.get_classifier(), nn.Module)
    with torch.no_grad():
        pooled = case.model.forward_head(case.features(), pre_logits=True)
    model = copy.deepcopy(case.model)
    with torch.no_grad():
        model.reset_classifier(0)
        assert model.num_classes == 0 and isinstance(model.get_classifier(), nn.Module)
        out = model(case.x)
        # 0 removes the final Linear: the pooled features, num_features wide; MobileNetV3 keeps
        # its hidden layer (head_hidden_size wide, timm's convention, stated in the README).
        # Token- and node-level heads are not pooled: one feature vector per token or node.
        # Either way it is what pre_logits=True gave (timm's test_model_default_cfgs checks it).
        width = getattr(model, "head_hidden_size", model.num_features)
        assert isinstance(out, torch.Tensor) and out.shape == (*case.rows, width)
        torch.testing.assert_close(out, pooled)

        if case.head == "lm":
            # The LM head predicts the vocabulary: a 7-way lm head has no meaning, and the
            # model says so (use a classification head for labels); its own size works.
            with pytest.raises(ValueError, match="vocab"):
                model.reset_classifier(7)
            classes = model.config.vocab_size
        else:
            classes = 7
        model.reset_classifier(classes)
        assert model.num_classes == classes and isinstance(model.get_classifier(), nn.Module)
        assert model(case.x).shape == (*case.rows, classes)


def _train_step(model: nn.Module, case: Case) -> dict[str, torch.Tensor | None]:
    """One training-mode forward and backward (with the routing loss where there is one);
    the parameters' gradients."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same dropout masks with and without checkpointing
    if _has_aux(model):
        out = model(case.x, return_aux=True)
        logits, aux_loss = out.logits, out.aux_loss
    else:
        logits, aux_loss = model(case.x), 0.0
    assert isinstance(logits, torch.Tensor) and logits.shape == (*case.rows, model.num_classes)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(2))
    ((logits * weights).sum() + aux_loss).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_grad_checkpointing(case: Case) -> None:
    # On the case's model itself (a deep copy of densenet161 costs as much as a training
    # step): no optimizer step, so only the gradients, the BatchNorm statistics and the
    # modes change, and all are put back.
    model = case.model
    buffers = {name: b.clone() for name, b in model.named_buffers()}

    def restore_buffers() -> None:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])

    try:
        expected = _train_step(model, case)
        restore_buffers()  # the same running statistics for the second step (GIN's BatchRenorm reads them)
        model.set_grad_checkpointing(True)
        grads = _train_step(model, case)
        assert model.training
    finally:
        model.set_grad_checkpointing(False)
        model.zero_grad(set_to_none=True)
        restore_buffers()
        model.eval()
    assert any(g is not None and g.abs().sum() > 0 for g in grads.values())
    # Recomputing activations changes no gradient (the models' docstrings say so).
    assert grads.keys() == expected.keys()
    differ = []
    for name, grad in grads.items():
        assert (grad is None) == (expected[name] is None), name
        if grad is not None:
            assert torch.isfinite(grad).all(), name
            if not torch.allclose(grad, expected[name], rtol=1e-4, atol=1e-5):
                differ.append(name)
    assert not differ, f"gradients change with checkpointing: {differ}"


def test_feature_levels(case: Case) -> None:
    model = case.model
    if case.kind != "images":  # feature levels are the vision models' (README)
        assert not hasattr(model, "forward_intermediates")
        return
    info = model.feature_info
    assert len(info) > 0
    height, width = case.x.shape[2:]
    # timm's FeatureInfo accessors: one value per level
    assert info.channels() == [level["num_chs"] for level in info]
    assert info.reduction() == [level["reduction"] for level in info]
    assert info.module_name(-1) == info[-1]["module"]
    with torch.no_grad():
        # timm's return: (final features, maps); an int n asks for the last n levels
        final, last = model.forward_intermediates(case.x, indices=1)
        assert isinstance(last, list) and len(last) == 1
        torch.testing.assert_close(final, case.features())
        maps = model.forward_intermediates(case.x, intermediates_only=True)
        assert isinstance(maps, list) and len(maps) == len(info)
        torch.testing.assert_close(last[0], maps[-1])
        for level, (fmap, level_info) in enumerate(zip(maps, info)):
            assert isinstance(fmap, torch.Tensor)
            # The input's sides are multiples of every reduction (see _image_size), so each
            # map is exactly (H / reduction, W / reduction): padded strided convolutions and
            # pools round up, patch embeddings divide exactly.
            r = level_info["reduction"]
            assert fmap.shape == (BATCH, level_info["num_chs"], height // r, width // r), (level, level_info)
            model.get_submodule(level_info["module"])  # the module it names exists
        # indices pick levels, negatives counting from the end: the same maps (levels 0 and 1
        # here, which stops early where the model computes no further than asked)
        levels = sorted({0, (1 - len(info)) % len(info)})
        some = model.forward_intermediates(case.x, [0, 1 - len(info)], intermediates_only=True)
        assert len(some) == len(levels)
        for fmap, level in zip(some, levels):
            torch.testing.assert_close(fmap, maps[level])
        # timm's pruning: a copy that keeps only the layers up to level 1 gives the same maps
        pruned = copy.deepcopy(model)
        assert pruned.prune_intermediate_layers([0, 1]) == [0, 1]
        for fmap, level in zip(
            pruned.forward_intermediates(case.x, [0, 1], intermediates_only=True), (0, 1), strict=True
        ):
            torch.testing.assert_close(fmap, maps[level])
    first = model.get_submodule(model.first_conv)  # what in_chans= adapts
    assert isinstance(first, nn.Conv2d) and first.in_channels == model.in_chans


def test_wrong_input_names_the_expected_one(case: Case) -> None:
    with pytest.raises((ValueError, TypeError), match="expects"):
        with torch.no_grad():
            case.model(_wrong_input(case))
