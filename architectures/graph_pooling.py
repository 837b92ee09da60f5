"""Graph readouts of the GIN models (graph.py): ``ThirdOrderPooling`` (moment and triangle
parts, optionally with first- and second-order terms), SOPool's ``SecondOrderPooling`` and the
plain ``SumReadout``, each a PyG ``Aggregation`` called as ``pool(x, batch)``. As PyG's own
aggregations, each compiles with ``torch.jit.script`` and runs under ``torch.compile`` without a
graph break when ``dim_size`` is given (the input checks step aside while a compiler captures).
Registers no models; graph.py re-exports these names.
"""

from __future__ import annotations

import warnings
from typing import Literal

import torch
import torch.nn as nn
from torch import Tensor

with warnings.catch_warnings():  # PyG scripts a few helpers at import, which torch now warns about
    warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated", category=FutureWarning)
    import torch_geometric.nn  # noqa: F401
from torch_geometric.nn.aggr import Aggregation
from torch_geometric.utils import scatter, to_dense_batch

from ._errors import InvalidArgumentError
from .layers import check_bool_options, is_capturing

Reduce = Literal["sum", "mean"]


def _signed_root(x: Tensor, power: int, eps: float) -> Tensor:
    """sign(x) * ((|x| + eps)^(1/power) - eps^(1/power)): the power normalisation of
    bilinear pooling, shifted by ``eps`` so its slope at 0 is finite (plain roots have an
    infinite one, which turns small values into huge gradients)."""
    return torch.sign(x) * ((x.abs() + eps) ** (1 / power) - eps ** (1 / power))


def _graph_index(x: Tensor, index: Tensor | None, ptr: Tensor | None) -> Tensor:
    """The graph id of each node: ``index``, or expanded from the CSR boundaries ``ptr``."""
    if index is not None:
        return index
    if ptr is None:  # PyG's __call__ passes one of them; a direct forward may not
        return torch.zeros(x.size(0), dtype=torch.long, device=x.device)
    return torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=x.device), ptr.diff())


class SecondOrderPooling(Aggregation):
    """SOPool's bilinear readout (SOPool_bimap, Wang & Ji, 2020): per graph,
    ``flatten(W^T (sum_i h_i h_i^T) W) = flatten(sum_i g_i g_i^T)`` with ``g_i = W^T h_i``,
    in O(nodes * (channels * out + out^2)); ``out_channels**2`` outputs. Run eagerly on a batch
    whose graphs are contiguous (as PyG batches them) and not padded more than `MAX_PADDING`
    times, it is one batched matrix product per batch (3-6x faster than the node-by-node outer
    products it otherwise sums, forward and backward); traced, compiled or scripted, node by node.
    Call it as a PyG readout: ``pool(x, batch)``."""

    MAX_PADDING = 4  # padded rows per node at most for the batched product

    def __init__(self, in_channels: int, out_channels: int = 32, reduce: Reduce = "sum") -> None:
        super().__init__()
        if reduce not in ("sum", "mean"):
            raise InvalidArgumentError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        self.in_channels, self.reduce_op = in_channels, reduce
        self.proj = nn.Linear(in_channels, out_channels, bias=False)
        self.out_channels = out_channels**2

    def reset_parameters(self) -> None:
        """Re-initialise the projection W (PyG's readout interface)."""
        self.proj.reset_parameters()

    def forward(
        self,
        x: Tensor,
        index: Tensor | None = None,
        ptr: Tensor | None = None,
        dim_size: int | None = None,
        dim: int = -2,
    ) -> Tensor:
        self.assert_two_dimensional_input(x, dim)
        index = _graph_index(x, index, ptr)
        g = self.proj(x)
        if not torch.jit.is_scripting():
            batched = self._batched(g, index, dim_size)
            if batched is not None:
                return batched
        outer = (g.unsqueeze(2) * g.unsqueeze(1)).flatten(1)
        return scatter(outer, index, 0, dim_size, self.reduce_op)

    @torch.jit.unused
    def _batched(self, g: Tensor, index: Tensor, dim_size: int | None) -> Tensor | None:
        """``sum_i g_i g_i^T`` per graph as one ``bmm`` of the zero-padded graphs, or None when
        the graphs are not contiguous or padding them would cost over `MAX_PADDING` x the nodes."""
        if is_capturing() or g.size(0) == 0 or bool((index[1:] < index[:-1]).any()):
            return None
        counts = torch.bincount(index, minlength=dim_size or 0)
        if dim_size is not None and counts.numel() > dim_size:  # a node past the last graph: scatter's error
            return None
        if counts.numel() * int(counts.max()) > self.MAX_PADDING * g.size(0):
            return None
        dense, _ = to_dense_batch(g, index, batch_size=counts.numel(), max_num_nodes=int(counts.max()))
        out = torch.bmm(dense.transpose(1, 2), dense).flatten(1)
        return out / counts.clamp_min(1).unsqueeze(-1).to(out.dtype) if self.reduce_op == "mean" else out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.in_channels}, out_channels={self.out_channels})"


class ThirdOrderPooling(Aggregation):
    """Third-order readout ``pool(x, batch, triangle_index=...)``: the moment and triangle parts,
    alone or together, and optional first- and second-order terms to concatenate (outputs in
    this order, ``out_channels`` in total):

    * ``first_order``: the plain sum (or mean) of the node embeddings (``in_channels``);
    * ``bilinear``: SOPool's readout (``SecondOrderPooling`` with ``out_channels=bilinear``),
      uncentred and unnormalised, so it keeps each graph's size (``bilinear**2``);
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
    signed roots to the second- and third-order moment vectors, and with ``l2`` then
    L2-normalises them per graph, as bilinear pooling does (Lin et al., 2015). The per-graph L2
    removes each graph's size and scale, which additive targets (a polar surface area, a count)
    are made of: gin3 builds this readout with ``first_order=True, l2=False`` and leaves the
    scales to the BatchRenorm after it.
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
        l2: bool = True,
        eps: float = 1e-6,
        bilinear: int = 0,
    ) -> None:
        super().__init__()
        check_bool_options(
            moment=moment, triangle=triangle, center=center, first_order=first_order,
            second_order=second_order, normalize=normalize, l2=l2,
        )  # fmt: skip
        if isinstance(bilinear, bool) or not isinstance(bilinear, int) or bilinear < 0:
            raise InvalidArgumentError(f"bilinear must be an int >= 0 (0: no SOPool part), got {bilinear!r}")
        if not (moment or triangle or first_order or second_order or bilinear):
            raise InvalidArgumentError(
                "ThirdOrderPooling needs at least one part: moment, triangle, first_order, second_order or bilinear"
            )
        if reduce not in ("sum", "mean"):
            raise InvalidArgumentError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        if rank < 1:
            raise InvalidArgumentError(f"rank must be >= 1, got {rank}")
        self.in_channels, self.rank, self.reduce_op = in_channels, rank, reduce
        self.moment, self.triangle, self.first_order, self.second_order = moment, triangle, first_order, second_order
        self.center, self.normalize, self.l2, self.eps = center, normalize, l2, eps
        # One Linear per CP factor set: u, v, w (moment) and p, q (second order) side by side.
        self.factor_sets = 3 * moment + 2 * second_order  # u, v, w and p, q
        self.factors = nn.Linear(in_channels, rank * self.factor_sets, bias=False) if self.factor_sets else None
        self.triangle_channels = (triangle_channels or rank) if triangle else 0
        self.phi = nn.Linear(in_channels, self.triangle_channels) if triangle else None
        self.bilinear = SecondOrderPooling(in_channels, bilinear, reduce) if bilinear else None
        # the outputs gin_sum's and gin_sopool's readouts have too, ahead of the higher orders
        self.lower_channels = in_channels * first_order + bilinear**2
        self.out_channels = self.lower_channels + rank * (second_order + moment) + self.triangle_channels
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise the CP factors and phi (PyG's readout interface)."""
        if self.factors is not None:
            # Unit-variance projections: u.h, v.h, w.h of order |h|, whatever in_channels is.
            nn.init.normal_(self.factors.weight, std=self.in_channels**-0.5)
        if self.phi is not None:
            self.phi.reset_parameters()
        if self.bilinear is not None:
            self.bilinear.reset_parameters()

    def forward(
        self,
        x: Tensor,
        index: Tensor | None = None,
        ptr: Tensor | None = None,
        dim_size: int | None = None,
        dim: int = -2,
        triangle_index: Tensor | None = None,
    ) -> Tensor:
        self.assert_two_dimensional_input(x, dim)
        index = _graph_index(x, index, ptr)
        if dim_size is None:  # PyG's __call__ gives it; TorchScript calls forward itself
            dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
        parts: list[Tensor] = []
        if self.first_order:
            parts.append(scatter(x, index, 0, dim_size, self.reduce_op))
        bilinear = self.bilinear
        if bilinear is not None:
            parts.append(bilinear(x, index, dim_size=dim_size))
        factors = self.factors
        if factors is not None:  # the moment and second-order parts
            proj = factors(x)
            if self.center:  # the factors are linear: centring their outputs centres h, on fewer channels
                proj = proj - scatter(proj, index, 0, dim_size, "mean")[index]
            proj = proj.view(-1, self.factor_sets, self.rank)
            if self.second_order:
                s = scatter(proj[:, -2] * proj[:, -1], index, 0, dim_size, self.reduce_op)
                parts.append(self._normalize(s, 2))
            if self.moment:
                z = scatter(proj[:, 0] * proj[:, 1] * proj[:, 2], index, 0, dim_size, self.reduce_op)
                parts.append(self._normalize(z, 3))
        phi = self.phi
        if phi is not None:  # the triangle part
            if triangle_index is None:
                raise InvalidArgumentError(
                    "ThirdOrderPooling(triangle=True) needs triangle_index, the [3, T] node indices of each "
                    "triangle: apply the AddTriangles transform to the data (e.g. dataset transform or "
                    "pre_transform=AddTriangles()) and pass triangle_index=data.triangle_index"
                )
            if not torch.jit.is_scripting():
                _check_triangles(x, triangle_index)
            parts.append(self._triangles(torch.tanh(phi(x)), index, dim_size, triangle_index))
        return torch.cat(parts, dim=-1)

    def _normalize(self, z: Tensor, power: int) -> Tensor:
        """With ``normalize``: the signed ``power``-th root, then (``l2``) L2 normalisation per graph."""
        if not self.normalize:
            return z
        z = _signed_root(z, power, self.eps)
        return z / z.norm(p=2, dim=-1, keepdim=True).clamp_min(self.eps) if self.l2 else z

    def _triangles(self, phi: Tensor, index: Tensor, dim_size: int, triangle_index: Tensor) -> Tensor:
        """The triangle part per graph from the nodes' ``phi`` = tanh(Linear(h))."""
        t = phi[triangle_index[0]] * phi[triangle_index[1]] * phi[triangle_index[2]]
        out = scatter(t, index[triangle_index[0]], 0, dim_size, "sum")
        if self.reduce_op == "mean":
            ones = torch.ones_like(index, dtype=phi.dtype)
            out = out / scatter(ones, index, 0, dim_size, "sum").clamp_min(1).unsqueeze(-1)
        return out

    def __repr__(self) -> str:
        parts = [p for p in ("first_order", "bilinear", "second_order", "moment", "triangle") if getattr(self, p)]
        return (
            f"{self.__class__.__name__}({self.in_channels}, rank={self.rank}, parts={parts}, reduce={self.reduce_op!r})"
        )


def _check_triangles(x: Tensor, triangle_index: Tensor) -> None:
    """Refuse a ``triangle_index`` that is not [3, T] int64 node indices of ``x``'s nodes. The
    node check reads a value from the tensor, so it steps aside under torch.compile and
    torch.export (a graph break, and a host sync, in the captured graph otherwise)."""
    if triangle_index.dim() != 2 or triangle_index.size(0) != 3 or triangle_index.dtype != torch.long:
        raise InvalidArgumentError(
            f"triangle_index must be a [3, T] int64 tensor of node indices (from AddTriangles), got "
            f"{triangle_index.dtype} of shape {tuple(triangle_index.shape)}"
        )
    if is_capturing() or not triangle_index.numel():
        return
    largest = int(triangle_index.max())
    if largest >= x.size(0):
        raise InvalidArgumentError(
            f"triangle_index refers to node {largest} but x has {x.size(0)} nodes: "
            "was AddTriangles applied before the graphs were batched or changed?"
        )


class SumReadout(Aggregation):
    """Sum of the node embeddings per graph, with ``out_channels`` like the other readouts."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.out_channels = in_channels

    def forward(
        self,
        x: Tensor,
        index: Tensor | None = None,
        ptr: Tensor | None = None,
        dim_size: int | None = None,
        dim: int = -2,
    ) -> Tensor:
        return self.reduce(x, index, ptr, dim_size, dim, reduce="sum")
