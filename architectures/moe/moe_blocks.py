"""The parts of the MoE transformers (moe_transformer.py): their config (`MoEConfig`), output
(`MoEOutput`), attention, blocks and `_MoEBody`, the stack the text and image models share.
The sparse MoE layer (router, experts, routing losses) and the dense SwiGLU MLP are in
moe_experts.py. Registers no models; moe_transformer.py re-exports these names.

Each block is pre-norm (RMSNorm) attention with rotary embeddings and grouped-query heads, then
a sparse MoE layer: a router picks ``top_k`` of ``num_experts`` SwiGLU experts per token
(softmax in fp32, top-k, optional renormalisation), optionally with a sigmoid-gated shared
expert (Qwen2-MoE) or a dense SwiGLU MLP instead in the layers listed in ``dense_layers``.

Parameter names are Hugging Face's Mixtral ones without the ``model.`` prefix
(``layers.0.self_attn.q_proj``, ``layers.0.mlp.gate``, ``layers.0.mlp.experts.gate_up_proj``),
so Mixtral, Qwen2-MoE and OLMoE checkpoints load by renaming keys (zoo.interop.hf_checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .._errors import InvalidArgumentError
from ..generation import KVCache
from ..layers import DefaultCfg, apply_rotary, check_float_option, check_int_option, check_rate_option
from .moe_experts import Dispatch, SparseMoeBlock, SwiGLU, routing_losses


@dataclass(frozen=True)
class MoEConfig:
    """Sizes and options of the transformer body; field names follow Hugging Face's configs
    where they exist. ``vocab_size``, ``tie_word_embeddings`` and the special token ids
    concern the text models only."""

    vocab_size: int = 259  # zoo.tokenizer.ByteTokenizer: 256 bytes + pad, bos, eos
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2  # grouped-query attention: each key/value head serves num_heads / num_kv_heads heads
    head_dim: int | None = None  # default hidden_size // num_heads
    intermediate_size: int = 512  # of each expert
    num_experts: int = 8
    top_k: int = 2
    norm_topk_prob: bool = True  # renormalise the top-k probabilities to sum to 1 (Mixtral)
    shared_expert_size: int = 0  # > 0: a sigmoid-gated dense SwiGLU expert every token passes through (Qwen2-MoE)
    dense_layers: tuple[int, ...] = ()  # layers with a dense SwiGLU MLP instead of experts
    dense_intermediate_size: int | None = None  # default intermediate_size * top_k: the same active compute
    max_position_embeddings: int = 4096  # recorded for export; rotary embeddings have no hard limit
    rope_theta: float | None = 10000.0  # None: no rotary embedding (the image model adds learned positions)
    rms_norm_eps: float = 1e-5
    qkv_bias: bool = False  # Qwen2-MoE
    qk_norm: bool = False  # RMSNorm over the whole query and key projections (OLMoE)
    clip_qkv: float | None = None  # clamp q, k, v to [-clip, clip] (OLMoE)
    sliding_window: int | None = None  # attend to the last sliding_window positions only (Mistral)
    attention_dropout: float = 0.0
    tie_word_embeddings: bool = False
    pad_token_id: int | None = None  # the special token ids are only recorded (for export): the
    bos_token_id: int | None = None  # model reads padding from attention masks, and generate
    eos_token_id: int | None = None  # takes its eos_token_id as an argument
    router_jitter: float = 0.0  # training: multiply the router's input by U(1 - j, 1 + j) (Switch
    # Transformer; transformers' Mixtral scales the experts' input too)
    router_aux_loss_coef: float = 0.01  # weight of the load-balancing loss in aux_loss
    router_z_loss_coef: float = 0.001  # weight of the router z-loss in aux_loss (ST-MoE)
    capacity_factor: float | None = None  # None: dropless; else each expert takes at most
    # ceil(capacity_factor * tokens * top_k / num_experts) token slots and drops the rest
    dispatch: Dispatch = "auto"
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        object.__setattr__(self, "dense_layers", tuple(sorted(set(self.dense_layers))))
        sizes = dict(
            vocab_size=1,
            hidden_size=1,
            num_layers=1,
            num_heads=1,
            num_kv_heads=1,
            intermediate_size=1,
            num_experts=1,
            top_k=1,
            shared_expert_size=0,
            max_position_embeddings=1,
        )
        optional_sizes = ("head_dim", "dense_intermediate_size", "sliding_window")
        try:
            for name, minimum in sizes.items():
                check_int_option(name, getattr(self, name), minimum)
            for name in optional_sizes:
                if getattr(self, name) is not None:
                    check_int_option(name, getattr(self, name), 1, what=" (or None)")
            check_rate_option("attention_dropout", self.attention_dropout)
            check_float_option("rms_norm_eps", self.rms_norm_eps, 0.0, low_open=True)
            if self.rope_theta is not None:
                check_float_option("rope_theta", self.rope_theta, 0.0, low_open=True)
        except ValueError as error:
            raise InvalidArgumentError(f"invalid MoE config: {error}") from None
        checks = [
            (
                self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads == 0,
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})",
            ),
            (
                self.head_dim is not None or self.hidden_size % self.num_heads == 0,
                f"hidden_size ({self.hidden_size}) must be a multiple of num_heads ({self.num_heads}), or give head_dim",
            ),
            (self.rope_theta is None or self.attention_head_dim % 2 == 0, "rotary embeddings need an even head_dim"),
            (
                self.num_experts > 0 and 1 <= self.top_k <= self.num_experts,
                f"top_k must be in 1..num_experts, got top_k={self.top_k}, num_experts={self.num_experts}",
            ),
            (
                all(0 <= i < self.num_layers for i in self.dense_layers),
                f"dense_layers {self.dense_layers} must be layer indices in 0..{self.num_layers - 1}",
            ),
            (self.capacity_factor is None or self.capacity_factor > 0, "capacity_factor must be positive or None"),
            (
                self.dispatch in get_args(Dispatch),
                f"dispatch must be one of {', '.join(map(repr, get_args(Dispatch)))}, got {self.dispatch!r}",
            ),
            (0.0 <= self.router_jitter < 1.0, f"router_jitter must be in [0, 1), got {self.router_jitter}"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgumentError(f"invalid MoE config: {message}")

    @property
    def attention_head_dim(self) -> int:
        """Channels per attention head: ``head_dim`` or hidden_size / num_heads."""
        return self.head_dim or self.hidden_size // self.num_heads

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> MoEConfig:
        """The config from a builder's keyword arguments, naming the valid ones on a typo."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise InvalidArgumentError(
                f"unknown MoE option(s) {', '.join(unknown)}; valid options: {', '.join(sorted(names))}"
            )
        return cls(**kwargs)


@dataclass
class MoEOutput:
    """What an MoE model's ``forward(..., return_aux=True)`` returns: the logits of its head and
    the routing losses.

    ``aux_loss`` = router_aux_loss_coef * load_balancing_loss + router_z_loss_coef *
    router_z_loss: add it to the task loss when training. ``expert_fractions[l, e]`` is the
    share of layer l's token slots routed to expert e (rows sum to 1; detached, for logging)."""

    logits: torch.Tensor
    aux_loss: torch.Tensor
    load_balancing_loss: torch.Tensor
    router_z_loss: torch.Tensor
    expert_fractions: torch.Tensor


# --------------------------------------------------------------------------- attention and blocks


class Attention(nn.Module):
    """Multi-head attention with grouped-query key/value heads and rotary embeddings, through
    ``F.scaled_dot_product_attention``."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.attention_head_dim
        self.dropout = config.attention_dropout
        self.clip_qkv = config.clip_qkv
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, q_size, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_size, bias=config.qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=False)
        if config.qk_norm:
            self.q_norm = nn.RMSNorm(q_size, eps=config.rms_norm_eps)
            self.k_norm = nn.RMSNorm(kv_size, eps=config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        q, k, v = self.project(x, rope)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        return self.attend(q, k, v, mask, is_causal)

    def project(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (N, heads, L, head_dim), keys and values (N, kv_heads, L, head_dim) of ``x``
        (N, L, hidden), rotated by ``rope`` (cos, sin)."""
        batch, length, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.clip_qkv is not None:
            q, k, v = (t.clamp(-self.clip_qkv, self.clip_qkv) for t in (q, k, v))
        q = q.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        return q, k, v

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool
    ) -> torch.Tensor:
        """The output projection of the queries' attention over the keys and values."""
        batch, _, length, _ = q.shape
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        # the width spelled out: -1 is ambiguous for an empty batch or sequence
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)) where the MLP is
    a sparse MoE layer (or a dense SwiGLU in a dense layer)."""

    def __init__(self, config: MoEConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.is_moe = index not in config.dense_layers
        if self.is_moe:
            self.mlp = SparseMoeBlock(
                config.hidden_size,
                config.intermediate_size,
                config.num_experts,
                config.top_k,
                norm_topk_prob=config.norm_topk_prob,
                shared_expert_size=config.shared_expert_size,
                router_jitter=config.router_jitter,
                capacity_factor=config.capacity_factor,
                dispatch=config.dispatch,
            )
        else:
            size = config.dense_intermediate_size or config.intermediate_size * config.top_k
            self.mlp = SwiGLU(config.hidden_size, size)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The block's output and, for an MoE layer, its router logits (tokens, experts)."""
        x = x + self.self_attn(self.input_layernorm(x), rope, mask, is_causal, cache, self.index)
        h = self.post_attention_layernorm(x)
        if not self.is_moe:
            return x + self.mlp(h), None
        out, router_logits = self.mlp(h)
        return x + out, router_logits


def _attention_mask(
    key_padding: torch.Tensor | None, q_len: int, k_len: int, causal: bool, window: int | None, device: torch.device
) -> tuple[torch.Tensor | None, bool]:
    """(boolean mask (N or 1, 1, q_len, k_len), is_causal) for SDPA; the queries are the last
    q_len of k_len positions. A query at a padded position still sees itself, so no row is
    empty (SDPA would return NaN there)."""
    windowed = window is not None and k_len > window
    if key_padding is None and not windowed:
        if not causal or q_len == 1:
            return None, False
        if q_len == k_len:
            return None, True
    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    k_pos = torch.arange(k_len, device=device)[None, :]
    allowed = k_pos <= q_pos if causal else torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    if windowed:
        allowed = allowed & (k_pos > q_pos - window)
    allowed = allowed[None, None]
    if key_padding is not None:
        allowed = allowed & (key_padding[:, None, None, :] | (k_pos == q_pos))
    return allowed, False


# --------------------------------------------------------------------------- the shared body


class _MoEBody(DefaultCfg, nn.Module):
    """The transformer stack shared by the text and image models: blocks, final norm,
    routing losses, activation checkpointing."""

    def __prepare_scriptable__(self) -> nn.Module:
        """``torch.jit.script`` asks this first: refused by name, with what captures the model instead."""
        raise InvalidArgumentError(
            f"{self.name} cannot be compiled by torch.jit.script: its MoE layers send each expert its "
            "tokens through a custom autograd Function over data-dependent group sizes (and generation "
            "keeps a Python KV cache), which TorchScript cannot compile. Capture it with torch.export "
            "(zoo.export(model, 'model.pt2', 'exported-program')), torch.jit.trace or torch.compile instead"
        )

    def __init__(self, config: MoEConfig, causal: bool, name: str) -> None:
        super().__init__()
        if causal and config.capacity_factor is not None:
            raise InvalidArgumentError(
                "capacity_factor (token dropping) makes tokens compete with later tokens for expert slots, "
                "which leaks the future into a causal model; use it with moe_encoder or moe_vit"
            )
        self.config = config
        self.causal = causal
        self.name = name
        self.grad_checkpointing = False
        self.pretrained_cfg: dict[str, Any] = {}
        self.num_features = config.hidden_size
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block in the backward pass instead of storing its activations
        (training only); the router jitter's random numbers are replayed, so gradients are
        unchanged."""
        self.grad_checkpointing = enable

    def _init_weights(self) -> None:
        """Normal(0, initializer_range) for every projection, expert and embedding, ones for
        the norms; the projections back into the residual stream are scaled by
        1 / sqrt(2 * num_layers) (GPT-2), which keeps the residual's variance from growing."""
        std = self.config.initializer_range
        for name, param in self.named_parameters():
            if param.ndim == 1:
                nn.init.ones_(param) if name.endswith("norm.weight") else nn.init.zeros_(param)
            elif name.endswith(("o_proj.weight", "down_proj", "down_proj.weight")):
                nn.init.normal_(param, std=std / math.sqrt(2 * self.config.num_layers))
            else:
                nn.init.normal_(param, std=std)

    def _run_layers(
        self,
        h: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        mask: torch.Tensor | None,
        is_causal: bool,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The blocks in order (each checkpointed when enabled): final hidden states and
        the MoE layers' router logits."""
        use_checkpoint = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        router_logits = []
        for layer in self.layers:
            if use_checkpoint:
                h, logits = checkpoint(layer, h, rope, mask, is_causal, cache, use_reentrant=False)
            else:
                h, logits = layer(h, rope, mask, is_causal, cache)
            if logits is not None:
                router_logits.append(logits)
        return h, router_logits

    def _output(
        self, logits: torch.Tensor, router_logits: list[torch.Tensor], token_mask: torch.Tensor | None
    ) -> MoEOutput:
        """The `MoEOutput` of ``logits``: routing losses weighted by the config and the experts'
        shares of token slots (zeros when every layer is dense)."""
        cfg = self.config
        if not router_logits:  # every layer dense
            zero = logits.new_zeros((), dtype=torch.float32)
            return MoEOutput(logits, zero, zero, zero, logits.new_zeros(0, cfg.num_experts, dtype=torch.float32))
        balance, z_loss, counts = routing_losses(router_logits, cfg.top_k, token_mask)
        aux = cfg.router_aux_loss_coef * balance + cfg.router_z_loss_coef * z_loss
        fractions = (counts / counts.sum(dim=1, keepdim=True).clamp(min=1)).detach()
        return MoEOutput(logits, aux, balance, z_loss, fractions)
