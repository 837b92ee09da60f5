"""Autoregressive generation for the causal MoE language model (`MoETransformer.generate` in
moe_transformer.py): the prompt runs once through the model's own forward path (prefill),
then each step decodes one token per sequence through `_decode_step`.

The decode step is built for small models on a CPU, where a step costs the number of PyTorch
operations it dispatches more than their arithmetic: every input is checked once before the
loop, the rotary tables and the padding mask are made once, the keys and values go into a
static `KVCache` (zero-filled, preallocated for prompt + new tokens, written in place at the
step's slot with ``index_copy_``), attention reads the whole cache under a boolean mask of the
filled slots, so that every step has the same shapes (what ``torch.compile`` needs), and the
MoE layers run every expert on the step's few tokens (`_few_token_experts`) instead of sorting
token slots by expert. benchmarks/generate.py measures it against transformers.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Literal, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import apply_rotary, rotary_cos_sin
from .moe_experts import MoEExperts, SparseMoeBlock, _dense_swiglu, _routing_matrix

Compile = bool | Literal["auto"]
# up to this many tokens a step runs every expert on every token (benchmarks/generate.py)
FEW_TOKENS = 16
CACHE_STEP = 64


class CacheSizes(Protocol):
    """What a `KVCache` reads from the model's config (moe_transformer.MoEConfig)."""

    num_layers: int
    num_kv_heads: int

    @property
    def attention_head_dim(self) -> int: ...


class KVCache:
    """Keys and values of every layer, preallocated for ``max_length`` positions and zero-filled
    (attention reads unfilled slots under a mask, and 0 * NaN would still be NaN), so that
    generation attends to the past without recomputing it."""

    def __init__(self, config: CacheSizes, batch_size: int, max_length: int, device: torch.device, dtype: torch.dtype):
        shape = (batch_size, config.num_kv_heads, max_length, config.attention_head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.length = 0  # positions filled in every layer
        self.max_length = max_length

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new positions' keys and values of ``layer``; return all of them so far."""
        end = self.length + k.shape[2]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    generator: torch.Generator | None = None,
    on_token: Callable[[torch.Tensor], None] | None = None,
    attention_mask: torch.Tensor | None = None,
    compile: Compile = "auto",
) -> torch.Tensor:
    """`MoETransformer.generate`, which documents the arguments; ``model`` has been checked
    to be a causal model with its lm head."""
    _check_options(max_new_tokens, temperature, top_k, top_p, compile)
    model._check_input(input_ids, attention_mask, 0)
    batch, length = input_ids.shape
    _check_prompt(model, input_ids, attention_mask)
    if max_new_tokens == 0:
        return input_ids.clone()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
    attention_mask = attention_mask.bool()
    # positions count real tokens only (as transformers' generate does), so a left-padded
    # prompt continues exactly as it would alone
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
    compiled = _use_compile(compile, input_ids.device)
    max_length = length + max_new_tokens
    if compiled:  # cache sizes in steps of CACHE_STEP: a compiled step serves many prompt lengths
        max_length = -(-max_length // CACHE_STEP) * CACHE_STEP
    cache = KVCache(model.config, batch, max_length, input_ids.device, model.embed_tokens.weight.dtype)
    logits = _prefill(model, input_ids, attention_mask, positions, cache)
    filled = torch.cat([attention_mask, attention_mask.new_zeros(batch, max_length - length)], dim=1)
    rope = _rope_table(model, max_length, input_ids.device)
    step_fn = _compiled_decode_step() if compiled else _decode_step
    qkv = [_fused_qkv(block.self_attn) for block in model.layers]
    slot = torch.tensor([length], device=input_ids.device)
    position = positions[:, -1:] + 1
    tokens, finished = [input_ids], torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
    for new in range(max_new_tokens):
        step = _sample(logits, temperature, top_k, top_p, generator)[:, None]
        if eos_token_id is not None:
            step = step.masked_fill(finished[:, None], eos_token_id)
            finished |= step[:, 0] == eos_token_id
        tokens.append(step)
        if on_token is not None:
            on_token(step)
        if new == max_new_tokens - 1 or (eos_token_id is not None and bool(finished.all())):
            break
        filled.index_fill_(1, slot, True)
        logits = step_fn(model, step, slot, position, rope, filled, cache.keys, cache.values, qkv)
        slot += 1
        position += 1
    return torch.cat(tokens, dim=1)


def _check_options(
    max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None, compile: Compile
) -> None:
    bad_top_k, bad_top_p = top_k is not None and top_k < 1, top_p is not None and not 0 < top_p <= 1
    if max_new_tokens < 0 or temperature < 0 or bad_top_k or bad_top_p:
        raise ValueError("need max_new_tokens >= 0, temperature >= 0, top_k >= 1 and 0 < top_p <= 1")
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")


def _check_prompt(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
    """A prompt of at least one token, padded on the left if at all."""
    if input_ids.shape[1] == 0:
        bos = model.config.bos_token_id
        start = (
            f"start from the bos token id {bos}, e.g. torch.full((N, 1), {bos})" if bos is not None
            else "start from a beginning-of-sequence token, e.g. zoo.tokenizer.ByteTokenizer's "
            "bos_token_id: torch.full((N, 1), tokenizer.bos_token_id)"
        )
        raise ValueError(
            f"generate needs a prompt of at least one token (input_ids of shape (N, L), L >= 1), "
            f"got shape {tuple(input_ids.shape)}; {start}"
        )
    if attention_mask is not None and input_ids.numel() and not attention_mask[:, -1].bool().all():
        raise ValueError(
            "generate continues every prompt from its last column, so the attention_mask must pad on the "
            "left (its last column all 1); got a row that ends in padding: pad prompts on the left, e.g. "
            "zoo.tokenizer.ByteTokenizer()(texts, padding_side='left')"
        )


def _use_compile(compile: Compile, device: torch.device) -> bool:
    """``"auto"`` compiles off the CPU only: on a CPU the compiled step was no faster
    (benchmarks/generate.py)."""
    return compile is True or (compile == "auto" and device.type != "cpu")


def _prefill(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, cache: KVCache
) -> torch.Tensor:
    """Run the prompt through the model, filling the first slots of ``cache``; the next-token
    logits (N, V) in fp32."""
    padding = None if attention_mask.all() else attention_mask
    h, _ = model._encode(input_ids, padding, cache, positions)
    return model.lm_head(h[:, -1]).float()


def _rope_table(model: nn.Module, max_length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """cos and sin for every position generation can reach, (max_length, head_dim) each."""
    config = model.config
    if config.rope_theta is None:
        return None
    positions = torch.arange(max_length, device=device)
    return rotary_cos_sin(positions, config.attention_head_dim, config.rope_theta, model.embed_tokens.weight.dtype)


def _decode_step(
    model: nn.Module,
    tokens: torch.Tensor,
    slot: torch.Tensor,
    position: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
    filled: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    qkv: list[tuple[torch.Tensor, torch.Tensor | None] | None],
) -> torch.Tensor:
    """Next-token logits (N, V) in fp32 after ``tokens`` (N, 1), which go into cache slot
    ``slot`` (a 1-element tensor) at rotary positions ``position`` (N, 1); ``filled`` (N, S)
    marks the cache slots to attend to, this one included; ``qkv`` holds each layer's
    `_fused_qkv` projection."""
    h = model.embed_tokens(tokens)
    step_rope = None
    if rope is not None:
        step_rope = rope[0][position][:, None], rope[1][position][:, None]  # (N, 1, 1, head_dim)
    mask = filled[:, None, None, :]
    window = model.config.sliding_window
    if window is not None:
        mask = mask & (torch.arange(filled.shape[1], device=filled.device) > slot - window)
    for block, k_cache, v_cache, fused in zip(model.layers, keys, values, qkv):
        attention = block.self_attn
        x = block.input_layernorm(h)
        q, k, v = attention.project(x, step_rope) if fused is None else _project_step(attention, x, *fused, step_rope)
        k_cache.index_copy_(2, slot, k)
        v_cache.index_copy_(2, slot, v)
        h = h + attention.attend(q, k_cache, v_cache, mask, False)
        x = block.post_attention_layernorm(h)
        if block.is_moe and tokens.shape[0] <= FEW_TOKENS:
            h = h + _few_token_experts(block.mlp, x[:, 0])[:, None]
        else:
            h = h + (block.mlp(x)[0] if block.is_moe else block.mlp(x))
    return model.lm_head(model.norm(h[:, 0])).float()


def _fused_qkv(attention: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The query, key and value projections as one weight (and bias), for one matmul per
    step; None where queries and keys are normalised separately (qk_norm)."""
    if attention.q_norm is not None:
        return None
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    bias = torch.cat([p.bias for p in projections]) if attention.q_proj.bias is not None else None
    return torch.cat([p.weight for p in projections]), bias


def _project_step(
    attention: nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`Attention.project` for one token per sequence through the fused projection, the
    queries and keys rotated together."""
    heads, kv_heads = attention.num_heads, attention.num_kv_heads
    qkv = F.linear(x, weight, bias)
    if attention.clip_qkv is not None:
        qkv = qkv.clamp(-attention.clip_qkv, attention.clip_qkv)
    qkv = qkv.view(x.shape[0], heads + 2 * kv_heads, 1, attention.head_dim)  # one position: (N, L, ...) = (N, ..., L)
    qk, v = qkv[:, : heads + kv_heads], qkv[:, heads + kv_heads :]
    if rope is not None:
        qk = apply_rotary(qk, *rope)
    return qk[:, :heads], qk[:, heads:], v


def _few_token_experts(layer: SparseMoeBlock, x: torch.Tensor) -> torch.Tensor:
    """The MoE layer on a few tokens ``x`` (T, H) in a handful of operations (no sort by
    expert): one token runs through its top-k experts' weights directly (matrix-vector
    products), more tokens through every expert, mixed by the routing weights."""
    _, weights, index = layer.route(x)
    experts = layer.experts
    if x.shape[0] == 1 and not torch.compiler.is_compiling():  # the loop reads the indices: a graph break
        out = _one_token_experts(x[0], weights[0].tolist(), index[0].tolist(), experts)[None]
    else:
        mix = _routing_matrix(index, weights, experts.num_experts, None).to(x.dtype)
        out = _dense_swiglu(x, mix, experts.gate_up_proj, experts.down_proj)
    if layer.shared_expert is not None:
        out = out + torch.sigmoid(layer.shared_expert_gate(x)) * layer.shared_expert(x)
    return out


def _one_token_experts(x: torch.Tensor, weights: list[float], index: list[int], experts: MoEExperts) -> torch.Tensor:
    """The weighted sum of the experts ``index`` on one token ``x`` (H,)."""
    inter = experts.down_proj.shape[-1]
    out = None
    for weight, expert in zip(weights, index):
        gate_up = F.linear(x, experts.gate_up_proj[expert])
        y = F.linear(F.silu(gate_up[:inter]) * gate_up[inter:], experts.down_proj[expert]) * weight
        out = y if out is None else out + y
    return out


@functools.cache
def _compiled_decode_step() -> Callable[..., torch.Tensor]:
    """`_decode_step` through torch.compile with static shapes (compiled on first use per
    model and cache size)."""
    return torch.compile(_decode_step, dynamic=False)


def _sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None
) -> torch.Tensor:
    """Next token per row of ``logits`` (N, V)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p  # the tokens after the nucleus
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, -math.inf))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)[:, 0]
