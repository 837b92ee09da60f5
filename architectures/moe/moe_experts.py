"""The sparse MoE layer of the MoE transformers (moe_transformer.py): router, experts and
routing losses.

`SparseMoeBlock` is the layer: a router picks ``top_k`` of ``num_experts`` experts per token,
optionally next to a sigmoid-gated shared expert. `MoEExperts` holds the experts, ``num_experts``
SwiGLU MLPs in two fused parameters, with the kernels that run them on the token slots the
router chose: a per-expert split with a hand-written backward (`_GroupedSwiGLU`), PyTorch's
grouped GEMM (`_grouped_mm_swiglu`) and a dense form for tracing and export (`_dense_swiglu`).
`SwiGLU` is the dense gated MLP (the shared expert, and the MLP of the transformer's dense
layers). `routing_losses` computes the load-balancing loss and the router z-loss from the
layers' router logits (`load_balancing_loss` and `router_z_loss` give one each).

The layer takes its sizes and options as arguments rather than the transformer's config, so
this module imports nothing from moe_transformer.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._errors import InvalidArgumentError

Dispatch = Literal["auto", "split", "grouped_mm", "dense"]


def _native_low_precision_matmul(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether matmuls run natively in ``dtype``. CPUs without bf16/fp16 units (no AVX512-BF16
    or AMX) fall back to a generic kernel, many times slower than fp32
    (benchmarks/moe_dispatch.py measures it on the machine at hand)."""
    if dtype not in (torch.bfloat16, torch.float16) or device.type != "cpu":
        return True
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return torch.ops.mkldnn._is_mkldnn_fp16_supported()


def _expert_rows(sizes: list[int]) -> list[tuple[int, slice]]:
    """(expert, rows of the sorted token slots) for every expert that received tokens."""
    bounds, start = [], 0
    for expert, size in enumerate(sizes):
        if size:
            bounds.append((expert, slice(start, start + size)))
        start += size
    return bounds


def _mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """out = a @ b, written in place (through a temporary when out has another dtype)."""
    if out.dtype == a.dtype:
        torch.mm(a, b, out=out)
    else:
        out.copy_(torch.mm(a, b))


class _GroupedSwiGLU(torch.autograd.Function):
    """SwiGLU experts on token slots sorted by expert: rows of expert e get
    (silu(x W1ᵀ) * x W3ᵀ) W2ᵀ, with [W1; W3] = gate_up[e] and W2 = down[e].

    Expert by expert on contiguous row slices: the matmuls write in place and the temporaries
    stay the size of one expert's rows (large fresh buffers cost page faults on a CPU). The
    backward writes each expert's weight gradient straight into one [E, ...] tensor and
    zero-fills only the experts that got no tokens; autograd through ``W[e]`` would instead
    allocate and add a full-size zero gradient per expert. Low-precision inputs are computed
    in fp32 where the device has no native low-precision matmul (`_native_low_precision_matmul`)."""

    @staticmethod
    def forward(
        ctx: Any, xs: torch.Tensor, sizes: list[int], gate_up: torch.Tensor, down: torch.Tensor
    ) -> torch.Tensor:
        compute = xs.dtype if _native_low_precision_matmul(xs.device, xs.dtype) else torch.float32
        inter = down.shape[-1]
        training = any(ctx.needs_input_grad)
        with torch.autocast(xs.device.type, enabled=False):
            x = xs.to(compute)
            gu = x.new_empty(x.shape[0], 2 * inter) if training else None  # saved for the backward
            y = x.new_empty(x.shape)
            for expert, rows in _expert_rows(sizes):
                gu_e = torch.mm(x[rows], gate_up[expert].to(compute).t(), out=gu[rows] if training else None)
                hidden = F.silu(gu_e[:, :inter]).mul_(gu_e[:, inter:])
                torch.mm(hidden, down[expert].to(compute).t(), out=y[rows])
        if training:
            ctx.save_for_backward(x, gu, gate_up, down)
            ctx.sizes = sizes
        return y.to(xs.dtype)

    @staticmethod
    def backward(
        ctx: Any, dy: torch.Tensor
    ) -> tuple[torch.Tensor | None, None, torch.Tensor | None, torch.Tensor | None]:
        x, gu, gate_up, down = ctx.saved_tensors
        need_x, _, need_gate_up, need_down = ctx.needs_input_grad
        inter = down.shape[-1]
        with torch.autocast(x.device.type, enabled=False):
            dy = dy.to(x.dtype).contiguous()
            d_x = torch.empty_like(x) if need_x else None
            d_gate_up = _weight_grad_buffer(gate_up, ctx.sizes) if need_gate_up else None
            d_down = _weight_grad_buffer(down, ctx.sizes) if need_down else None
            for expert, rows in _expert_rows(ctx.sizes):
                gate, up = gu[rows, :inter], gu[rows, inter:]
                silu = F.silu(gate)
                d_hidden = dy[rows] @ down[expert].to(x.dtype)
                if need_down:
                    _mm_into(d_down[expert], dy[rows].t(), silu * up)
                d_gu = torch.empty_like(gu[rows])
                # d_gate = d_hidden * up * silu'(gate), in one fused kernel
                torch.ops.aten.silu_backward(d_hidden * up, gate, grad_input=d_gu[:, :inter])
                torch.mul(d_hidden, silu, out=d_gu[:, inter:])
                if need_x:
                    torch.mm(d_gu, gate_up[expert].to(x.dtype), out=d_x[rows])
                if need_gate_up:
                    _mm_into(d_gate_up[expert], d_gu.t(), x[rows])
        return d_x, None, d_gate_up, d_down


def _weight_grad_buffer(weight: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """An uninitialised gradient for a [E, ...] expert weight, zeroed for experts without tokens."""
    grad = torch.empty_like(weight)
    for expert, size in enumerate(sizes):
        if size == 0:
            grad[expert].zero_()
    return grad


def _grouped_mm_swiglu(
    xs: torch.Tensor, sizes: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor
) -> torch.Tensor:
    """The same SwiGLU experts through PyTorch's grouped GEMM (one kernel per projection, no
    host sync: the group boundaries stay on the device)."""
    offsets = torch.cumsum(sizes, dim=0, dtype=torch.int32)
    gu = F.grouped_mm(xs, gate_up.transpose(1, 2), offs=offsets)
    inter = down.shape[-1]
    return F.grouped_mm(F.silu(gu[:, :inter]) * gu[:, inter:], down.transpose(1, 2), offs=offsets)


def is_tracing() -> bool:
    """Whether torch.jit.trace or torch.export is capturing the model (shapes must not depend on data)."""
    return torch.jit.is_tracing() or torch.compiler.is_exporting()


def _routing_matrix(
    expert_index: torch.Tensor, expert_weight: torch.Tensor, num_experts: int, capacity: int | None
) -> torch.Tensor:
    """(T, E) routing weights, zero off each token's chosen experts; with a ``capacity``, also
    zero for the slots an expert drops (the priority order of `MoEExperts`: first choices
    before second ones, then token order)."""
    num_tokens, top_k = expert_index.shape
    if capacity is not None:
        chosen = F.one_hot(expert_index.t().reshape(-1), num_experts)  # slots in priority order
        rank = ((chosen.cumsum(0) - chosen) * chosen).sum(-1)  # earlier slots of the same expert
        expert_weight = expert_weight * (rank < capacity).view(top_k, num_tokens).t()
    mix = expert_weight.new_zeros(num_tokens, num_experts)
    return mix.scatter(1, expert_index, expert_weight)


def _dense_swiglu(x: torch.Tensor, mix: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """Every expert on every token (E / top_k times the sparse FLOPs), mixed by ``mix`` (T, E):
    the same result as the sparse dispatch without data-dependent shapes."""
    inter = down.shape[-1]
    gu = torch.matmul(x, gate_up.transpose(1, 2))  # (E, T, 2I)
    y = torch.matmul(F.silu(gu[..., :inter]) * gu[..., inter:], down.transpose(1, 2))  # (E, T, H)
    return torch.einsum("te,eth->th", mix, y)


class MoEExperts(nn.Module):
    """``num_experts`` SwiGLU MLPs stored as two fused 3-D parameters in Mixtral's layout:
    ``gate_up_proj`` [E, 2I, H] (gate rows first, then up) and ``down_proj`` [E, H, I].

    Dispatch: the token slots (token, choice) are sorted by expert, each expert runs on its
    contiguous slice, and the results are put back in slot order and mixed per token with the
    routing weights, which is deterministic (no atomic scatter-add). ``dispatch="split"`` runs one
    matmul per non-empty expert (`_GroupedSwiGLU`); ``"grouped_mm"`` uses
    ``torch.nn.functional.grouped_mm`` (torch >= 2.10); ``"auto"`` picks grouped_mm for bf16 on
    CUDA (SM >= 80, where its kernels exist) when torch has it, and the split elsewhere: on CPU
    the two run alike, except that without native bf16 matmul (AVX2) PyTorch's CPU grouped_mm
    in bf16 falls far behind fp32 (benchmarks/moe_dispatch.py compares them).
    ``"dense"`` (`_dense_swiglu`) has no data-dependent shapes, which is what ``torch.jit.trace``
    and ``torch.export`` need; ``"auto"`` takes it while they trace the model."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, dispatch: Dispatch = "auto") -> None:
        super().__init__()
        if dispatch == "grouped_mm" and not hasattr(F, "grouped_mm"):
            raise InvalidArgumentError(
                "dispatch='grouped_mm' needs torch.nn.functional.grouped_mm, added in torch 2.10; "
                f"this is torch {torch.__version__}: use dispatch='auto' or 'split', or upgrade torch"
            )
        self.num_experts = num_experts
        self.dispatch = dispatch
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))

    def forward(
        self, x: torch.Tensor, expert_index: torch.Tensor, expert_weight: torch.Tensor, capacity: int | None = None
    ) -> torch.Tensor:
        """Mix the experts' outputs for tokens ``x`` (T, H), each routed to the experts
        ``expert_index`` (T, k) with weights ``expert_weight`` (T, k). With a ``capacity``,
        an expert keeps at most that many slots (first choices before second ones, then
        token order, as in GShard) and a dropped slot contributes nothing."""
        num_tokens, top_k = expert_index.shape
        dtype = self._compute_dtype(x)
        if self.dispatch == "dense" or (self.dispatch == "auto" and is_tracing()):
            mix = _routing_matrix(expert_index, expert_weight, self.num_experts, capacity).to(dtype)
            return _dense_swiglu(x.to(dtype), mix, self.gate_up_proj.to(dtype), self.down_proj.to(dtype)).to(x.dtype)
        num_slots = num_tokens * top_k
        experts = expert_index.reshape(-1)
        slot = torch.arange(num_slots, device=x.device)
        priority = (slot % top_k) * num_tokens + slot // top_k
        order = torch.argsort(experts * num_slots + priority)  # slots grouped by expert, in priority order
        sizes = torch.bincount(experts, minlength=self.num_experts)
        if capacity is not None:
            starts = torch.cumsum(sizes, 0) - sizes
            rank = slot - starts.repeat_interleave(sizes)  # position of each sorted slot inside its expert
            order = order[rank < capacity]
            sizes = sizes.clamp(max=capacity)
        xs = x[order // top_k].to(dtype)
        gate_up, down = self.gate_up_proj.to(dtype), self.down_proj.to(dtype)
        if xs.shape[0] and self._use_grouped_mm(xs):  # no token slots (an empty batch): the split runs nothing
            ys = _grouped_mm_swiglu(xs, sizes, gate_up, down)
        else:
            ys = _GroupedSwiGLU.apply(xs, sizes.tolist(), gate_up, down)
        # back to slot order (a dropped slot reads an appended zero row), then per token the
        # weighted sum over its k slots as a (1, k) @ (k, H) product: no atomic adds
        position = torch.full((num_slots,), len(order), device=x.device).index_put_((order,), slot[: len(order)])
        if capacity is not None:
            ys = F.pad(ys, (0, 0, 0, 1))
        slots = ys[position].view(num_tokens, top_k, ys.shape[-1])  # not -1: ambiguous for 0 tokens
        return torch.bmm(expert_weight[:, None, :].to(ys.dtype), slots)[:, 0].to(x.dtype)

    @staticmethod
    def _compute_dtype(x: torch.Tensor) -> torch.dtype:
        """The autocast dtype inside an autocast region (as nn.Linear would run), unless the
        device has no native matmul for it; the input's dtype otherwise."""
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            if _native_low_precision_matmul(x.device, dtype):
                return dtype
        return x.dtype

    def _use_grouped_mm(self, xs: torch.Tensor) -> bool:
        """Whether to dispatch through ``F.grouped_mm``: as asked, or on "auto" where its kernels run."""
        if self.dispatch == "auto":  # where PyTorch's grouped GEMM kernels run: bf16 on CUDA SM >= 80, torch >= 2.10
            return (
                hasattr(F, "grouped_mm")
                and xs.is_cuda
                and xs.dtype == torch.bfloat16
                and torch.cuda.get_device_capability(xs.device) >= (8, 0)
            )
        return self.dispatch == "grouped_mm"

    def extra_repr(self) -> str:
        e, two_i, h = self.gate_up_proj.shape
        return f"num_experts={e}, hidden_size={h}, intermediate_size={two_i // 2}, dispatch={self.dispatch!r}"


class SwiGLU(nn.Module):
    """Dense gated MLP, down(silu(gate(x)) * up(x)), with Llama's parameter names."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    """The sparse MoE layer: a router (``gate``) picks ``top_k`` of ``num_experts`` SwiGLU
    experts per token (softmax in fp32, top-k, renormalised if ``norm_topk_prob``), the experts
    run in `MoEExperts`, and a sigmoid-gated shared expert of ``shared_expert_size`` (Qwen2-MoE)
    is added if that is > 0. ``router_jitter`` multiplies the router's input by U(1 - j, 1 + j)
    in training; with a ``capacity_factor`` each expert takes at most
    ceil(capacity_factor * tokens * top_k / num_experts) token slots. Returns the output and
    the router's logits (tokens, experts), from which `routing_losses` are computed."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        num_experts: int,
        top_k: int,
        *,
        norm_topk_prob: bool = True,
        shared_expert_size: int = 0,
        router_jitter: float = 0.0,
        capacity_factor: float | None = None,
        dispatch: Dispatch = "auto",
    ) -> None:
        super().__init__()
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.jitter = router_jitter
        self.capacity_factor = capacity_factor
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = MoEExperts(num_experts, hidden_size, intermediate_size, dispatch)
        if shared_expert_size:
            self.shared_expert = SwiGLU(hidden_size, shared_expert_size)
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)
        else:
            self.shared_expert = self.shared_expert_gate = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        router_input = x
        if self.training and self.jitter > 0:
            router_input = x * torch.empty_like(x).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        logits, weights, index = self.route(router_input)
        capacity = None
        if self.capacity_factor is not None:
            capacity = math.ceil(self.capacity_factor * x.shape[0] * self.top_k / self.experts.num_experts)
        out = self.experts(x, index, weights, capacity)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(shape), logits

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The router's logits (T, E) for tokens ``x`` (T, H), and each token's ``top_k``
        experts' weights (fp32) and indices (T, k)."""
        logits = self.gate(x)
        probs = logits.float().softmax(dim=-1)
        weights, index = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights, index


def routing_losses(
    router_logits: Sequence[torch.Tensor], top_k: int, token_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(load-balancing loss, router z-loss, routed-slot counts per layer and expert) of the MoE
    layers' router logits (each (tokens, experts)), over the tokens ``token_mask`` keeps.

    Load balancing: Switch Transformer's auxiliary loss (Fedus et al., 2021, eq. 4-6) as Mixtral
    computes it, num_experts * sum_e f_e * P_e with f_e the share of tokens whose top-k holds
    expert e and P_e its mean router probability, both pooled over all layers' tokens, so the
    value equals transformers' ``load_balancing_loss_func``; 1 for balanced top-1 routing.
    Z-loss: ST-MoE's (Zoph et al., 2022, eq. 5) mean squared log-partition function of the
    logits, which keeps them small and the routing numerically stable."""
    logits = torch.stack([g.float() for g in router_logits])  # (layers, tokens, experts)
    num_layers, num_tokens, num_experts = logits.shape
    mask = torch.ones(num_tokens, device=logits.device) if token_mask is None else token_mask.reshape(-1).float()
    probs = logits.softmax(dim=-1)
    selected = probs.topk(top_k, dim=-1).indices.reshape(num_layers, -1)
    counts = torch.zeros(num_layers, num_experts, device=logits.device)
    counts.scatter_add_(1, selected, mask.repeat_interleave(top_k).expand(num_layers, -1))
    rows = (mask.sum() * num_layers).clamp(min=1)  # no tokens (an empty batch): zero losses, not 0 / 0
    token_share = counts.sum(0) / rows
    mean_prob = (probs * mask[:, None]).sum(dim=(0, 1)) / rows
    balance = num_experts * (token_share * mean_prob).sum()
    z_loss = (logits.logsumexp(dim=-1).square() * mask).sum() / rows
    return balance, z_loss, counts


def load_balancing_loss(
    router_logits: Sequence[torch.Tensor], num_experts: int, top_k: int, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The load-balancing loss of `routing_losses`, with transformers' signature."""
    if router_logits[0].shape[-1] != num_experts:
        raise InvalidArgumentError(
            f"router logits have {router_logits[0].shape[-1]} experts, not num_experts={num_experts}"
        )
    return routing_losses(router_logits, top_k, token_mask)[0]


def router_z_loss(router_logits: Sequence[torch.Tensor], token_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The router z-loss of `routing_losses`."""
    return routing_losses(router_logits, 1, token_mask)[1]
