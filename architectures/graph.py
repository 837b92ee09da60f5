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
baseline. Registered models: ``gin_sum``, ``gin_sopool`` and ``gin3``, one ``GIN`` class each
with its readout, so a comparison changes one name and nothing else.
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

from ._registry import register_model

from .layers import LinearClassifier, check_input_dtype, check_int_option, check_rate_option

Reduce = Literal["sum", "mean"]
GRAPH_HEADS = ("graph_classification", "graph_regression", "node_classification")


def _signed_root(x: Tensor, power: int, eps: float) -> Tensor:
    """sign(x) * ((|x| + eps)^(1/power) - eps^(1/power)): the power normalisation of
    bilinear pooling, shifted by ``eps`` so its slope at 0 is finite (plain roots have an
    infinite one, which turns small values into huge gradients)."""
    return torch.sign(x) * ((x.abs() + eps) ** (1 / power) - eps ** (1 / power))


def _graph_index(aggr: Aggregation, x: Tensor, index: Tensor | None, ptr: Tensor | None, dim: int) -> Tensor:
    """The graph id of each node: ``index``, or expanded from the CSR boundaries ``ptr``."""
    aggr.assert_two_dimensional_input(x, dim)
    if index is None:
        index = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=x.device), ptr.diff())
    return index


class SecondOrderPooling(Aggregation):
    """SOPool's bilinear readout (SOPool_bimap, Wang & Ji, 2020): per graph,
    ``flatten(W^T (sum_i h_i h_i^T) W) = flatten(sum_i g_i g_i^T)`` with ``g_i = W^T h_i``,
    computed node by node in O(nodes * (channels * out + out^2)); ``out_channels**2`` outputs.
    Call it as a PyG readout: ``pool(x, batch)``."""

    def __init__(self, in_channels: int, out_channels: int = 32, reduce: Reduce = "sum") -> None:
        super().__init__()
        if reduce not in ("sum", "mean"):
            raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        self.in_channels, self.reduce_op = in_channels, reduce
        self.proj = nn.Linear(in_channels, out_channels, bias=False)
        self.out_channels = out_channels**2

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()

    def forward(
        self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
        dim_size: int | None = None, dim: int = -2,
    ) -> Tensor:
        index = _graph_index(self, x, index, ptr, dim)
        g = self.proj(x)
        outer = (g.unsqueeze(2) * g.unsqueeze(1)).flatten(1)
        return scatter(outer, index, 0, dim_size, self.reduce_op)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, out_channels={self.out_channels})"


class ThirdOrderPooling(Aggregation):
    """Third-order readout ``pool(x, batch, triangle_index=...)``: the moment and triangle parts,
    alone or together, and optional first- and second-order terms to concatenate (outputs in
    this order, ``out_channels`` in total):

    * ``first_order``: the plain sum (or mean) of the node embeddings (``in_channels``);
    * ``second_order``: ``s_k = sum_i (p_k . h_i)(q_k . h_i)``, signed square root (``rank``);
    * ``moment``: ``z_k = sum_i (u_k . h_i)(v_k . h_i)(w_k . h_i)``, the third-order moment
      tensor of the node embeddings (centred per graph when ``center``) contracted with ``rank``
      learned rank-one tensors, in O(nodes * channels * rank); signed cube root (``rank``);
    * ``triangle``: ``sum over triangles (i, j, k) of phi(h_i) * phi(h_j) * phi(h_k)`` with
      ``phi = tanh(Linear)`` (``triangle_channels``, default ``rank``), which needs
      ``triangle_index`` [3, T] from ``AddTriangles``. It is kept linear in the triangles (no
      root), so counts reach a linear head; tanh bounds each factor, so each triangle adds at
      most 1 per channel.

    ``reduce="mean"`` divides every part by the graph's node count. ``normalize`` applies the
    signed roots and then L2-normalises the second- and third-order moment vectors per graph,
    as bilinear pooling does (Lin et al., 2015), for stable training.
    """

    def __init__(
        self,
        in_channels: int,
        rank: int = 32,
        moment: bool = True,
        triangle: bool = False,
        triangle_channels: int | None = None,
        center: bool = True,
        reduce: Reduce = "sum",
        first_order: bool = False,
        second_order: bool = False,
        normalize: bool = True,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if not (moment or triangle or first_order or second_order):
            raise ValueError("ThirdOrderPooling needs at least one part: moment, triangle, first_order or second_order")
        if reduce not in ("sum", "mean"):
            raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.in_channels, self.rank, self.reduce_op = in_channels, rank, reduce
        self.moment, self.triangle, self.first_order, self.second_order = moment, triangle, first_order, second_order
        self.center, self.normalize, self.eps = center, normalize, eps
        # One Linear per CP factor set: u, v, w (moment) and p, q (second order) side by side.
        self.factors = nn.Linear(in_channels, rank * (3 * moment + 2 * second_order), bias=False) \
            if moment or second_order else None
        self.triangle_channels = (triangle_channels or rank) if triangle else 0
        self.phi = nn.Linear(in_channels, self.triangle_channels) if triangle else None
        self.out_channels = (
            in_channels * first_order + rank * (second_order + moment) + self.triangle_channels
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.factors is not None:
            # Unit-variance projections: u.h, v.h, w.h of order |h|, whatever in_channels is.
            nn.init.normal_(self.factors.weight, std=self.in_channels**-0.5)
        if self.phi is not None:
            self.phi.reset_parameters()

    def forward(
        self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
        dim_size: int | None = None, dim: int = -2, triangle_index: Tensor | None = None,
    ) -> Tensor:
        index = _graph_index(self, x, index, ptr, dim)
        if dim_size is None:
            dim_size = int(index.max()) + 1 if index.numel() else 0
        parts: list[Tensor] = []
        if self.first_order:
            parts.append(scatter(x, index, 0, dim_size, self.reduce_op))
        if self.moment or self.second_order:
            proj = self.factors(x)
            if self.center:  # the factors are linear: centring their outputs centres h, on fewer channels
                proj = proj - scatter(proj, index, 0, dim_size, "mean")[index]
            proj = proj.view(-1, 3 * self.moment + 2 * self.second_order, self.rank)
            if self.second_order:
                s = scatter(proj[:, -2] * proj[:, -1], index, 0, dim_size, self.reduce_op)
                parts.append(self._normalize(s, 2))
            if self.moment:
                z = scatter(proj[:, 0] * proj[:, 1] * proj[:, 2], index, 0, dim_size, self.reduce_op)
                parts.append(self._normalize(z, 3))
        if self.triangle:
            parts.append(self._triangles(x, index, dim_size, triangle_index))
        return torch.cat(parts, dim=-1)

    def _normalize(self, z: Tensor, power: int) -> Tensor:
        if not self.normalize:
            return z
        z = _signed_root(z, power, self.eps)
        return z / z.norm(dim=-1, keepdim=True).clamp_min(self.eps)

    def _triangles(self, x: Tensor, index: Tensor, dim_size: int, triangle_index: Tensor | None) -> Tensor:
        if triangle_index is None:
            raise ValueError(
                "ThirdOrderPooling(triangle=True) needs triangle_index, the [3, T] node indices of each "
                "triangle: apply the AddTriangles transform to the data (e.g. dataset transform or "
                "pre_transform=AddTriangles()) and pass triangle_index=data.triangle_index"
            )
        if triangle_index.dim() != 2 or triangle_index.size(0) != 3 or triangle_index.dtype != torch.long:
            raise ValueError(
                f"triangle_index must be a [3, T] int64 tensor of node indices (from AddTriangles), got "
                f"{triangle_index.dtype} of shape {tuple(triangle_index.shape)}"
            )
        if triangle_index.numel() and int(triangle_index.max()) >= x.size(0):
            raise ValueError(
                f"triangle_index refers to node {int(triangle_index.max())} but x has {x.size(0)} nodes: "
                "was AddTriangles applied before the graphs were batched or changed?"
            )
        phi = torch.tanh(self.phi(x))
        t = phi[triangle_index[0]] * phi[triangle_index[1]] * phi[triangle_index[2]]
        out = scatter(t, index[triangle_index[0]], 0, dim_size, "sum")
        if self.reduce_op == "mean":
            out = out / scatter(torch.ones_like(index, dtype=x.dtype), index, 0, dim_size).clamp_min(1).unsqueeze(-1)
        return out

    def __repr__(self) -> str:
        parts = [p for p in ("first_order", "second_order", "moment", "triangle") if getattr(self, p)]
        return f"{self.__class__.__name__}({self.in_channels}, rank={self.rank}, parts={parts}, reduce={self.reduce_op!r})"


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
            raise ValueError("AddTriangles needs data.edge_index and a known number of nodes (data.num_nodes)")
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
                raise ValueError("AddTriangles needs data.edge_index and a known number of nodes (data.num_nodes)")
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


class SumReadout(Aggregation):
    """Sum of the node embeddings per graph, with ``out_channels`` like the other readouts."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.out_channels = in_channels

    def forward(
        self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
        dim_size: int | None = None, dim: int = -2,
    ) -> Tensor:
        return self.reduce(x, index, ptr, dim_size, dim, reduce="sum")


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

    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
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
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
                self.num_batches_tracked += 1
            standardised = (x - mean) / (var + self.eps).sqrt() * r + d
        return standardised * self.weight + self.bias


class GIN(LinearClassifier, nn.Module):
    """Graph Isomorphism Network (Xu et al., 2019) with a choice of readout.

    ``num_layers`` GINConv layers (GINEConv when ``edge_dim`` is set, for edge features), each
    a 2-layer MLP with BatchNorm, then BatchNorm and ReLU; the node embedding is the
    concatenation of every layer's output (jumping knowledge, Xu et al., 2018). Graph heads
    read it out with ``readout`` ("sum", "second_order": SOPool bilinear, "third_order":
    ``ThirdOrderPooling`` with ``readout_kwargs``), then ``BatchRenorm``: the parts' scales are
    evened out by an affine map, so a count that the readout carries linearly stays linear.
    ``node_classification`` skips the readout.

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
        name: str = "gin",
    ) -> None:
        super().__init__()
        if head not in GRAPH_HEADS:
            raise ValueError(f"head must be one of {', '.join(GRAPH_HEADS)}; got {head!r}")
        if readout not in ("sum", "second_order", "third_order"):
            raise ValueError(f"readout must be 'sum', 'second_order' or 'third_order', got {readout!r}")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (in_channels, num_layers)):
            raise ValueError(
                f"need in_channels >= 1 and num_layers >= 1, got {in_channels} and {num_layers}; "
                "for graphs without node features add constant ones (torch_geometric.transforms.Constant())"
            )
        check_int_option("hidden_channels", hidden_channels)
        if edge_dim is not None:
            check_int_option("edge_dim", edge_dim, what=" (or None)")
        check_rate_option("dropout", dropout)
        self.name, self.head, self.readout_name = name, head, readout
        self.in_channels, self.edge_dim = in_channels, edge_dim
        self.pretrained_cfg: dict[str, Any] = {}
        self.grad_checkpointing = False

        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(num_layers):
            mlp = MLP([in_channels if i == 0 else hidden_channels, hidden_channels, hidden_channels], norm="batch_norm")
            conv = GINConv(mlp, train_eps=train_eps) if edge_dim is None else \
                GINEConv(mlp, train_eps=train_eps, edge_dim=edge_dim)
            self.convs.append(conv)
            self.norms.append(nn.BatchNorm1d(hidden_channels))
        node_channels = hidden_channels * num_layers

        self.pool: Aggregation | None = None
        if head == "node_classification":
            self.num_features = node_channels
            self.norm: nn.Module = nn.Identity()
        else:
            kwargs = dict(readout_kwargs or {})
            if readout == "sum":
                if kwargs:
                    raise ValueError(f"the sum readout takes no options, got {sorted(kwargs)}")
                self.pool = SumReadout(node_channels)
            elif readout == "second_order":
                self.pool = SecondOrderPooling(node_channels, **kwargs)
            else:
                self.pool = ThirdOrderPooling(node_channels, **kwargs)
            self.num_features = self.pool.out_channels
            self.norm = BatchRenorm(self.num_features)
        self.drop = nn.Dropout(dropout)
        if num_classes is None:
            num_classes = 1 if head == "graph_regression" else 2
        self.reset_classifier(num_classes)

    @property
    def needs_triangles(self) -> bool:
        return isinstance(self.pool, ThirdOrderPooling) and self.pool.triangle

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each GIN layer in the backward pass instead of storing its activations
        (training only); BatchNorm running statistics are updated once more by the recompute."""
        self.grad_checkpointing = enable

    def _check_input(self, data: Data) -> None:
        expected = f"{self.name} expects a torch_geometric Data/Batch with x [num_nodes, {self.in_channels}] and edge_index [2, E]"
        if not isinstance(data, Data) and not hasattr(data, "edge_index"):
            raise TypeError(f"{expected}; got {type(data).__name__}")
        x = data.x
        if x is None:
            raise ValueError(f"{expected}; data.x is None: add node features, e.g. torch_geometric.transforms.Constant()")
        if x.dim() != 2:
            raise ValueError(f"{expected}; got x of shape {tuple(x.shape)}")
        if x.size(1) != self.in_channels:
            raise ValueError(
                f"{expected}; got x of shape {tuple(x.shape)}: load the model with "
                f"in_channels={x.size(1)} (dataset.num_features)"
            )
        check_input_dtype(
            x, self.norms[0].weight.dtype, self.name, "node features data.x", "e.g. data.x.float()", "data.x"
        )
        if data.edge_index is None or data.edge_index.dim() != 2 or data.edge_index.size(0) != 2:
            shape = None if data.edge_index is None else tuple(data.edge_index.shape)
            raise ValueError(f"{expected}; got edge_index of shape {shape}")
        if self.edge_dim is not None:
            edge_attr = data.edge_attr
            if edge_attr is None or edge_attr.dim() != 2 or edge_attr.size(1) != self.edge_dim:
                shape = None if edge_attr is None else tuple(edge_attr.shape)
                raise ValueError(f"{self.name} was built with edge_dim={self.edge_dim}: data.edge_attr must be "
                                 f"[E, {self.edge_dim}], got {shape}")
            check_input_dtype(edge_attr, self.norms[0].weight.dtype, self.name, "edge features data.edge_attr",
                              "e.g. data.edge_attr.float()", "data.edge_attr")
        if self.needs_triangles and getattr(data, "triangle_index", None) is None:
            raise ValueError(
                f"{self.name} uses the triangle readout, which needs data.triangle_index: apply the AddTriangles "
                "transform (from zoo.architectures.graph), e.g. dataset = TUDataset(root, name, "
                "pre_transform=AddTriangles()), or load the model with triangle=False"
            )

    def _layer(self, i: int, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None) -> Tensor:
        extra = (edge_attr,) if self.edge_dim is not None else ()
        return torch.relu(self.norms[i](self.convs[i](x, edge_index, *extra)))

    def _node_embeddings(self, data: Data) -> Tensor:
        x, edge_attr = data.x, data.edge_attr if self.edge_dim is not None else None
        use_checkpoint = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        outputs = []
        for i in range(len(self.convs)):
            if use_checkpoint:
                x = checkpoint(self._layer, i, x, data.edge_index, edge_attr, use_reentrant=False)
            else:
                x = self._layer(i, x, data.edge_index, edge_attr)
            outputs.append(x)
        return torch.cat(outputs, dim=-1)

    def forward_features(self, data: Data) -> Tensor:
        """Graph embeddings [num_graphs, num_features] (node embeddings for node_classification)."""
        self._check_input(data)
        h = self._node_embeddings(data)
        if self.pool is None:
            return h
        if data.batch is None:  # a single graph
            batch, num_graphs = h.new_zeros(h.size(0), dtype=torch.long), 1
        else:
            batch = data.batch
            num_graphs = data.num_graphs if hasattr(data, "num_graphs") else int(batch.max()) + 1
        extra = {"triangle_index": data.triangle_index} if self.needs_triangles else {}
        return self.norm(self.pool(h, batch, dim_size=num_graphs, **extra))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        return x if pre_logits else self.fc(self.drop(x))

    def forward(self, data: Data) -> Tensor:
        return self.forward_head(self.forward_features(data))


_GIN_ARGS = ("in_channels", "num_classes", "head", "hidden_channels", "num_layers", "edge_dim", "train_eps", "dropout")


def _build(name: str, readout: str, defaults: dict[str, Any], kwargs: dict[str, Any]) -> GIN:
    """Split ``kwargs`` into GIN's own and the readout's (``rank=``, ``triangle=``...)."""
    model_kwargs = {k: v for k, v in kwargs.items() if k in _GIN_ARGS}
    readout_kwargs = {**defaults, **{k: v for k, v in kwargs.items() if k not in _GIN_ARGS}}
    return GIN(readout=readout, readout_kwargs=readout_kwargs, name=name, **model_kwargs)


@register_model(heads=GRAPH_HEADS, inputs="graphs")
def gin_sum(**kwargs: Any) -> GIN:
    """GIN with jumping knowledge and sum readout (Xu et al., 2019): the first-order baseline."""
    return _build("gin_sum", "sum", {}, kwargs)


@register_model(heads=GRAPH_HEADS, inputs="graphs")
def gin_sopool(**kwargs: Any) -> GIN:
    """GIN with SOPool's bilinear second-order readout (Wang & Ji, 2020); ``out_channels=32``
    gives 32^2 = 1024 graph features."""
    return _build("gin_sopool", "second_order", {}, kwargs)


@register_model(heads=GRAPH_HEADS, inputs="graphs")
def gin3(**kwargs: Any) -> GIN:
    """GIN with third-order pooling: moment (rank 32) and triangle (32 channels) parts. The
    triangle part needs ``AddTriangles`` on the data; ``triangle=False`` or ``moment=False``
    drops a part, ``first_order=True`` adds the sum readout, and the other
    ``ThirdOrderPooling`` options pass through."""
    return _build("gin3", "third_order", dict(moment=True, triangle=True), kwargs)
