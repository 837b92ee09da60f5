"""Graph models on torch-geometric: a GIN encoder with jumping-knowledge concatenation and a
choice of readout, among them third-order pooling.

Sum, mean and max readouts keep first-order statistics of the node embeddings, and message
passing bounded by 1-WL cannot count triangles (Chen et al., 2020). ``ThirdOrderPooling``
adds interactions among three things at a time, at a cost linear in nodes and triangles:

* **moment**: the third-order moment tensor ``sum_i h_i (x) h_i (x) h_i`` of the (centred)
  node embeddings, read through a learned CP factorisation
  ``z_k = sum_i (u_k . h_i)(v_k . h_i)(w_k . h_i)`` without building the d^3 tensor;
* **triangle**: a sum over the graph's triangles of the symmetric function
  ``phi(h_i) * phi(h_j) * phi(h_k)``, so order-3 relations of the structure reach the
  readout. ``AddTriangles`` lists the triangles once per graph, as a dataset transform.

``SecondOrderPooling`` is SOPool's bilinear variant (Wang & Ji, 2020), the second-order
baseline. The readouts are in graph_pooling.py (imported here too); this module holds
``AddTriangles``, ``BatchRenorm`` and the model. Registered models: ``gin_sum``,
``gin_sopool`` and ``gin3``, one ``GIN`` class each with its readout, so a comparison changes
one name and nothing else.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.checkpoint import checkpoint

with warnings.catch_warnings():  # PyG scripts a few helpers at import, which torch now warns about
    warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated", category=FutureWarning)
    import torch_geometric.nn  # noqa: F401
from torch_geometric.data import Data
from torch_geometric.nn import MLP, GINConv, GINEConv
from torch_geometric.nn.aggr import Aggregation
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import scatter

from ._errors import InvalidArgumentError
from ._registry import register_model

# the readouts live in graph_pooling.py; imported here, where they have always been importable from
from .graph_pooling import Reduce, SecondOrderPooling, SumReadout, ThirdOrderPooling  # noqa: F401
from .layers import LinearClassifier, check_bool_options, check_input_dtype, check_int_option, check_rate_option

GRAPH_HEADS = ("graph_classification", "graph_regression", "node_classification")


class AddTriangles(BaseTransform):
    """Lists every triangle of a graph once into ``data.triangle_index`` ([3, T], each column's
    nodes ascending, columns sorted), for ``ThirdOrderPooling(triangle=True)``.

    The edges are read as an undirected simple graph (direction, duplicates and self-loops
    ignored). Vectorised, no loop over nodes: edges are oriented from lower to higher
    (degree, id) rank, each wedge a -> b -> c is tested for the closing edge a -> c with a
    binary search, so each triangle is found exactly once, in O(E^1.5). Because the attribute
    name contains "index", PyG's ``Batch`` concatenates it along the last dimension and offsets
    it by the preceding graphs' node counts, like ``edge_index``.
    """

    def forward(self, data: Data) -> Data:
        n = data.num_nodes
        if n is None or data.edge_index is None:
            raise InvalidArgumentError(
                "AddTriangles needs data.edge_index and a known number of nodes (data.num_nodes)"
            )
        data.triangle_index = triangles(data.edge_index, n)
        return data

    def many(self, graphs: Sequence[Data], chunk: int = 4096) -> list[Data]:
        """The transform of each graph (copies, like ``self(data)``), listing the triangles of
        ``chunk`` graphs at a time on their disjoint union: the same triangles without the
        per-graph cost of some 30 small tensor ops (about 2 ms a graph on a CPU)."""
        out: list[Data] = []
        for first in range(0, len(graphs), chunk):
            part = [copy.copy(data) for data in graphs[first : first + chunk]]
            if any(data.num_nodes is None or data.edge_index is None for data in part):
                raise InvalidArgumentError(
                    "AddTriangles needs data.edge_index and a known number of nodes (data.num_nodes)"
                )
            offsets = torch.tensor([0] + [data.num_nodes for data in part]).cumsum(0)
            union = torch.cat([data.edge_index + offset for data, offset in zip(part, offsets.tolist())], dim=1)
            found = triangles(union, int(offsets[-1]))  # columns sorted, so grouped by graph
            owner = torch.searchsorted(offsets, found[0], right=True) - 1
            counts = torch.bincount(owner, minlength=len(part)).tolist()
            for data, tri, offset in zip(part, found.split(counts, dim=1), offsets.tolist()):
                data.triangle_index = tri - offset
            out.extend(part)
        return out


def triangles(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The triangles of the undirected simple graph on ``edge_index``: [3, T], see AddTriangles."""
    device = edge_index.device
    row, col = edge_index
    lo, hi = torch.minimum(row, col), torch.maximum(row, col)
    keys = torch.unique(lo[lo != hi] * num_nodes + hi[lo != hi])
    u, v = keys // num_nodes, keys % num_nodes
    degree = torch.bincount(torch.cat([u, v]), minlength=num_nodes)
    order = torch.argsort(degree * num_nodes + torch.arange(num_nodes, device=device))
    rank = torch.empty_like(order)
    rank[order] = torch.arange(num_nodes, device=device)
    forward = rank[u] < rank[v]
    src, dst = torch.where(forward, u, v), torch.where(forward, v, u)
    oriented, _ = torch.sort(src * num_nodes + dst)
    src, dst = oriented // num_nodes, oriented % num_nodes
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=device)
    ptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_nodes), 0)
    # Wedges a -> b -> c: every oriented edge (a, b) followed by each out-edge of b.
    count = ptr[dst + 1] - ptr[dst]
    a = torch.repeat_interleave(src, count)
    start = torch.repeat_interleave(ptr[dst] - (torch.cumsum(count, 0) - count), count)
    b = torch.repeat_interleave(dst, count)
    c = dst[start + torch.arange(a.numel(), device=device)]
    wanted = a * num_nodes + c
    found = torch.searchsorted(oriented, wanted).clamp_max(max(oriented.numel() - 1, 0))
    closed = oriented[found] == wanted  # no edges: no wedges either, all empty
    tri = torch.stack([a[closed], b[closed], c[closed]]).sort(dim=0).values
    for key in (2, 1, 0):  # stable sorts, last key first: columns in lexicographic order
        tri = tri[:, torch.sort(tri[key], stable=True).indices]
    return tri


class BatchRenorm(nn.BatchNorm1d):
    """Batch renormalisation (Ioffe, 2017) without clipping: the forward pass standardises with
    the running mean and variance, in training as in eval, while the gradient flows through the
    batch statistics as in BatchNorm; then BatchNorm's per-channel scale and shift. So the
    output of a graph never depends on the other graphs of its batch (BatchNorm's batch noise
    limits how precisely a count can be regressed), and readout parts of very different scales
    (sums over nodes, triangle sums, normalised moments) reach the head at unit scale, an affine
    map of the readout that keeps a linearly carried count linear. The first training batch
    sets the running statistics. A BatchNorm subclass, so frozen copies stay in eval mode
    during fine-tuning like every frozen BatchNorm."""

    def __init__(self, num_features: int, momentum: float | None = 0.1, eps: float = 1e-5) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum)

    def forward(self, x: Tensor) -> Tensor:
        x = x.float()  # statistics in fp32, as autocast does for BatchNorm
        if not self.training or x.size(0) < 2:
            standardised = (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps)
        else:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                if self.num_batches_tracked == 0:
                    self.running_mean.copy_(mean)
                    self.running_var.copy_(var)
                std, running_std = (var + self.eps).sqrt(), (self.running_var + self.eps).sqrt()
                r, d = std / running_std, (mean - self.running_mean) / running_std
                # momentum None: a cumulative average, as in BatchNorm (torch.optim.swa_utils.update_bn)
                weight = 1 / float(self.num_batches_tracked + 1) if self.momentum is None else self.momentum
                self.running_mean.lerp_(mean, weight)
                self.running_var.lerp_(var, weight)
                self.num_batches_tracked += 1
            standardised = (x - mean) / (var + self.eps).sqrt() * r + d
        return standardised * self.weight + self.bias


def _check_gin_options(
    head: str,
    readout: str,
    in_channels: int,
    num_layers: int,
    hidden_channels: int,
    edge_dim: int | None,
    dropout: float,
) -> None:
    """Raise ValueError naming the option unless `GIN` can be built with these."""
    if head not in GRAPH_HEADS:
        raise InvalidArgumentError(f"head must be one of {', '.join(GRAPH_HEADS)}; got {head!r}")
    if readout not in ("sum", "second_order", "third_order"):
        raise InvalidArgumentError(f"readout must be 'sum', 'second_order' or 'third_order', got {readout!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (in_channels, num_layers)):
        raise InvalidArgumentError(
            f"need in_channels >= 1 and num_layers >= 1, got {in_channels} and {num_layers}; "
            "for graphs without node features add constant ones (torch_geometric.transforms.Constant())"
        )
    check_int_option("hidden_channels", hidden_channels)
    if edge_dim is not None:
        check_int_option("edge_dim", edge_dim, what=" (or None)")
    check_rate_option("dropout", dropout)


class GIN(LinearClassifier, nn.Module):
    """Graph Isomorphism Network (Xu et al., 2019) with a choice of readout.

    ``num_layers`` GINConv layers (GINEConv when ``edge_dim`` is set, for edge features), each
    a 2-layer MLP with BatchNorm, then BatchNorm and ReLU; the node embedding is the
    concatenation of every layer's output (jumping knowledge, Xu et al., 2018). Graph heads
    read it out with ``readout`` ("sum", "second_order": SOPool bilinear, "third_order":
    ``ThirdOrderPooling`` with ``readout_kwargs``), then ``BatchRenorm``: the parts' scales are
    evened out by an affine map, so a count that the readout carries linearly stays linear.
    ``node_classification`` skips the readout. ``start_as_sum`` zeroes that affine map's scale
    on the readout's parts after the first-order sum and SOPool's part (``bilinear``), so
    training starts from ``gin_sum`` (or ``gin_sopool``) and opens each higher-order channel as
    it helps (gin3's default). ``virtual_node`` adds a node
    joined to every node of its graph (Gilmer et al., 2017; OGB's GIN-VN): before each layer
    after the first, an MLP of the sum of the node embeddings and the virtual node's last state
    gives its new state, which is added to every node, so a layer sees the whole molecule.

    ``forward_features(data)`` is the graph embedding [num_graphs, num_features] (node
    embeddings [num_nodes, num_features] for node_classification); ``forward_head`` is dropout
    and the linear head. The input is a PyG ``Data``/``Batch`` with ``x`` [N, in_channels],
    ``edge_index``, ``batch`` (optional for a single graph), ``edge_attr`` when ``edge_dim`` is
    set and ``triangle_index`` for the triangle readout.
    """

    classifier_attr = "fc"

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int | None = None,
        head: str = "graph_classification",
        hidden_channels: int = 64,
        num_layers: int = 4,
        edge_dim: int | None = None,
        readout: Literal["sum", "second_order", "third_order"] = "sum",
        readout_kwargs: dict[str, Any] | None = None,
        train_eps: bool = True,
        dropout: float = 0.0,
        start_as_sum: bool = False,
        virtual_node: bool = False,
        name: str = "gin",
    ) -> None:
        super().__init__()
        _check_gin_options(head, readout, in_channels, num_layers, hidden_channels, edge_dim, dropout)
        check_bool_options(train_eps=train_eps, start_as_sum=start_as_sum, virtual_node=virtual_node)
        self.name, self.head, self.readout_name = name, head, readout
        self.in_channels, self.edge_dim = in_channels, edge_dim
        self.pretrained_cfg: dict[str, Any] = {}
        self.grad_checkpointing = False

        self._build_layers(in_channels, hidden_channels, num_layers, edge_dim, train_eps)
        # a virtual node per graph (Gilmer et al., 2017; OGB's GIN-VN): before each layer after the
        # first, the sum of the node embeddings and the virtual node's state through an MLP, added to every node
        self.virtual = (
            nn.ModuleList(MLP([hidden_channels] * 3, norm="batch_norm") for _ in range(num_layers - 1))
            if virtual_node
            else None
        )
        self._build_readout(head, readout, readout_kwargs, hidden_channels * num_layers)
        if start_as_sum:
            self._gate_higher_orders()
        self.drop = nn.Dropout(dropout)
        if num_classes is None:
            num_classes = 1 if head == "graph_regression" else 2
        self.reset_classifier(num_classes)

    def _build_layers(
        self, in_channels: int, hidden_channels: int, num_layers: int, edge_dim: int | None, train_eps: bool
    ) -> None:
        """``convs`` (GINConv, or GINEConv with edge features, each a 2-layer MLP with
        BatchNorm) and the BatchNorm after each, ``norms``."""
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(num_layers):
            mlp = MLP([in_channels if i == 0 else hidden_channels, hidden_channels, hidden_channels], norm="batch_norm")
            conv = (
                GINConv(mlp, train_eps=train_eps)
                if edge_dim is None
                else GINEConv(mlp, train_eps=train_eps, edge_dim=edge_dim)
            )
            self.convs.append(conv)
            self.norms.append(nn.BatchNorm1d(hidden_channels))

    def _build_readout(
        self, head: str, readout: str, readout_kwargs: dict[str, Any] | None, node_channels: int
    ) -> None:
        """``pool`` and ``norm`` (`BatchRenorm`) of the graph heads, and ``num_features``; for
        node_classification no pool and an identity norm."""
        self.pool: Aggregation | None = None
        if head == "node_classification":
            self.num_features = node_channels
            self.norm: nn.Module = nn.Identity()
            return
        kwargs = dict(readout_kwargs or {})
        if readout == "sum":
            if kwargs:
                raise InvalidArgumentError(f"the sum readout takes no options, got {sorted(kwargs)}")
            self.pool = SumReadout(node_channels)
        elif readout == "second_order":
            self.pool = SecondOrderPooling(node_channels, **kwargs)
        else:
            self.pool = ThirdOrderPooling(node_channels, **kwargs)
        self.num_features = self.pool.out_channels
        self.norm = BatchRenorm(self.num_features)

    def _gate_higher_orders(self) -> None:
        """Zero the readout norm's scale on every part after the first-order sum (and SOPool's
        bilinear part, when the readout has one), so the model starts as ``gin_sum`` (or
        ``gin_sopool`` with the sum) and each higher-order channel enters as training opens its
        scale (a gate the BatchRenorm's standardisation cannot undo, since it follows it).
        Without a first-order or bilinear part there is nothing to start as: nothing changes."""
        pool = self.pool
        if isinstance(pool, ThirdOrderPooling) and pool.lower_channels:
            with torch.no_grad():
                self.norm.weight[pool.lower_channels :] = 0.0

    @property
    def size_kwargs(self) -> dict[str, Any]:
        """The options that fix its parameters' shapes beside the data's (``hidden_channels``,
        ``num_layers``, ``virtual_node``): what a saved configuration states, so a later change
        of the defaults cannot change what it builds."""
        size: dict[str, Any] = {"hidden_channels": self.norms[0].num_features, "num_layers": len(self.convs)}
        return size | {"virtual_node": True} if self.virtual is not None else size

    @property
    def needs_triangles(self) -> bool:
        """Whether the readout reads ``data.triangle_index`` (the triangle part of third-order pooling)."""
        return isinstance(self.pool, ThirdOrderPooling) and self.pool.triangle

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each GIN layer in the backward pass instead of storing its activations
        (training only); BatchNorm running statistics are updated once more by the recompute."""
        self.grad_checkpointing = enable

    def _check_input(self, data: Data) -> None:
        """Raise an error naming the fix unless ``data`` has the node (and edge) features and
        indices this model was built for, rather than a shape error deep inside PyG."""
        expected = f"{self.name} expects a torch_geometric Data/Batch with x [num_nodes, {self.in_channels}] and edge_index [2, E]"
        if not isinstance(data, Data) and not hasattr(data, "edge_index"):
            raise InvalidArgumentError(f"{expected}; got {type(data).__name__}")
        x = data.x
        if x is None:
            raise InvalidArgumentError(
                f"{expected}; data.x is None: add node features, e.g. torch_geometric.transforms.Constant()"
            )
        if x.dim() != 2:
            raise InvalidArgumentError(f"{expected}; got x of shape {tuple(x.shape)}")
        if x.size(1) != self.in_channels:
            raise InvalidArgumentError(
                f"{expected}; got x of shape {tuple(x.shape)}: load the model with "
                f"in_channels={x.size(1)} (dataset.num_features)"
            )
        check_input_dtype(
            x, self.norms[0].weight.dtype, self.name, "node features data.x", "e.g. data.x.float()", "data.x"
        )
        if data.edge_index is None or data.edge_index.dim() != 2 or data.edge_index.size(0) != 2:
            shape = None if data.edge_index is None else tuple(data.edge_index.shape)
            raise InvalidArgumentError(f"{expected}; got edge_index of shape {shape}")
        if self.edge_dim is not None:
            edge_attr = data.edge_attr
            if edge_attr is None or edge_attr.dim() != 2 or edge_attr.size(1) != self.edge_dim:
                shape = None if edge_attr is None else tuple(edge_attr.shape)
                raise InvalidArgumentError(
                    f"{self.name} was built with edge_dim={self.edge_dim}: data.edge_attr must be "
                    f"[E, {self.edge_dim}], got {shape}"
                )
            check_input_dtype(
                edge_attr,
                self.norms[0].weight.dtype,
                self.name,
                "edge features data.edge_attr",
                "e.g. data.edge_attr.float()",
                "data.edge_attr",
            )
        if self.needs_triangles and getattr(data, "triangle_index", None) is None:
            raise InvalidArgumentError(
                f"{self.name} uses the triangle readout, which needs data.triangle_index: apply the AddTriangles "
                "transform (from zoo.architectures.graph), e.g. dataset = TUDataset(root, name, "
                "pre_transform=AddTriangles()), or load the model with triangle=False"
            )

    def _layer(self, i: int, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None) -> Tensor:
        """GIN layer ``i``: convolution, BatchNorm, ReLU (a method, so checkpoint can recompute it)."""
        extra = (edge_attr,) if self.edge_dim is not None else ()
        return torch.relu(self.norms[i](self.convs[i](x, edge_index, *extra)))

    def _node_embeddings(self, data: Data, batch: Tensor, num_graphs: int) -> Tensor:
        """Every layer's node embeddings, concatenated (jumping knowledge):
        [num_nodes, num_layers * hidden_channels]."""
        x, edge_attr = data.x, data.edge_attr if self.edge_dim is not None else None
        use_checkpoint = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        outputs, state = [], None
        for i in range(len(self.convs)):
            if self.virtual is not None and i > 0:
                pooled = scatter(x, batch, 0, num_graphs, "sum")
                state = self.virtual[i - 1](pooled if state is None else pooled + state)
                x = x + state[batch]
            if use_checkpoint:
                x = checkpoint(self._layer, i, x, data.edge_index, edge_attr, use_reentrant=False)
            else:
                x = self._layer(i, x, data.edge_index, edge_attr)
            outputs.append(x)
        return torch.cat(outputs, dim=-1)

    @staticmethod
    def _batch(data: Data) -> tuple[Tensor, int]:
        """(each node's graph, the number of graphs) of ``data``: one graph when it has no ``batch``."""
        if data.batch is None:
            return data.edge_index.new_zeros(data.x.size(0)), 1
        return data.batch, data.num_graphs if hasattr(data, "num_graphs") else int(data.batch.max()) + 1

    def forward_node_features(self, data: Data) -> Tensor:
        """Every node's embedding before the readout, all layers concatenated: [num_nodes,
        num_layers * hidden_channels] (what a node-level objective such as atom masking reads)."""
        self._check_input(data)
        return self._node_embeddings(data, *self._batch(data))

    def forward_readout(self, h: Tensor, data: Data) -> Tensor:
        """The graph embeddings [num_graphs, num_features] of node embeddings ``h`` of ``data``
        (``h`` itself for node_classification): forward_features' second half."""
        if self.pool is None:
            return h
        batch, num_graphs = self._batch(data)
        extra = {"triangle_index": data.triangle_index} if self.needs_triangles else {}
        return self.norm(self.pool(h, batch, dim_size=num_graphs, **extra))

    def forward_features(self, data: Data) -> Tensor:
        """Graph embeddings [num_graphs, num_features] (node embeddings for node_classification)."""
        return self.forward_readout(self.forward_node_features(data), data)

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Dropout and the linear head, unless ``pre_logits``."""
        return x if pre_logits else self.fc(self.drop(x))

    def forward(self, data: Data) -> Tensor:
        return self.forward_head(self.forward_features(data))


_GIN_ARGS = (
    "in_channels",
    "num_classes",
    "head",
    "hidden_channels",
    "num_layers",
    "edge_dim",
    "train_eps",
    "dropout",
    "start_as_sum",
    "virtual_node",
)


def _build(name: str, readout: str, defaults: dict[str, Any], kwargs: dict[str, Any]) -> GIN:
    """Split ``kwargs`` (over the ``defaults`` of both) into GIN's own and the readout's
    (``rank=``, ``triangle=``...)."""
    kwargs = {**{k: v for k, v in defaults.items() if k in _GIN_ARGS}, **kwargs}
    defaults = {k: v for k, v in defaults.items() if k not in _GIN_ARGS}
    model_kwargs = {k: v for k, v in kwargs.items() if k in _GIN_ARGS}
    readout_kwargs = {**defaults, **{k: v for k, v in kwargs.items() if k not in _GIN_ARGS}}
    return GIN(readout=readout, readout_kwargs=readout_kwargs, name=name, **model_kwargs)


@register_model(inputs="graphs", heads=GRAPH_HEADS, finetune_head="graph_classification")
def gin_sum(**kwargs: Any) -> GIN:
    """GIN with jumping knowledge and sum readout (Xu et al., 2019): the first-order baseline."""
    return _build("gin_sum", "sum", {}, kwargs)


@register_model(inputs="graphs", heads=GRAPH_HEADS, finetune_head="graph_classification")
def gin_sopool(**kwargs: Any) -> GIN:
    """GIN with SOPool's bilinear second-order readout (Wang & Ji, 2020); ``out_channels=32``
    gives 32^2 = 1024 graph features."""
    return _build("gin_sopool", "second_order", {}, kwargs)


GIN3_SIZE = {"hidden_channels": 96, "num_layers": 3}  # gin3's default size (its docstring says why)


@register_model(inputs="graphs", heads=GRAPH_HEADS, finetune_head="graph_classification", finetune_example="gin3")
def gin3(**kwargs: Any) -> GIN:
    """GIN with third-order pooling on top of the sum, 3 layers of 96 channels: the first-order
    sum, the third-order moment (rank 32, signed cube root, magnitude kept) and triangle (32
    channels) parts, gated so training starts as ``gin_sum`` (``start_as_sum``). The size was
    chosen on the validation splits of four molecule sets (docs/families/graph.md): as good as 4
    layers of 128 (better on two sets, worse on two) in about two thirds of the time per epoch;
    dropout 0.2 before the head, chosen there too (TPSA's validation loss 23% lower, the three
    other sets level).
    The published weights state their own size (the molecule weights: 4 layers of 128; those
    before 2026-11-28: 4 of 64). The triangle part needs ``AddTriangles`` on the data;
    ``triangle=False``, ``moment=False`` or ``first_order=False`` drops a part, and the other
    ``ThirdOrderPooling`` options pass through (the weights published before 2026-11 use
    ``first_order=False, l2=True``: the parts without the sum, moments L2-normalised per graph)."""
    defaults = dict(
        **GIN3_SIZE,
        first_order=True,
        moment=True,
        triangle=True,
        l2=False,
        start_as_sum=True,
        dropout=0.2,
    )
    return _build("gin3", "third_order", defaults, kwargs)
