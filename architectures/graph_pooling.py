"""Graph readouts of the GIN models (graph.py): ``ThirdOrderPooling`` (moment and triangle
parts, optionally with first- and second-order terms), SOPool's ``SecondOrderPooling`` and the
plain ``SumReadout``, each a PyG ``Aggregation`` called as ``pool(x, batch)``. Registers no
models; graph.py re-exports these names.
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
from torch_geometric.utils import scatter

Reduce = Literal["sum", "mean"]


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
        """Re-initialise the projection W (PyG's readout interface)."""
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
        """Re-initialise the CP factors and phi (PyG's readout interface)."""
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
        """With ``normalize``: the signed ``power``-th root, then L2 normalisation per graph."""
        if not self.normalize:
            return z
        z = _signed_root(z, power, self.eps)
        return z / z.norm(dim=-1, keepdim=True).clamp_min(self.eps)

    def _triangles(self, x: Tensor, index: Tensor, dim_size: int, triangle_index: Tensor | None) -> Tensor:
        """The triangle part per graph, after checking ``triangle_index`` against ``x``."""
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
