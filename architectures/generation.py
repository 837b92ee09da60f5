"""Autoregressive generation for the causal MoE language model (`MoETransformer.generate` in
moe_transformer.py): the prompt runs once through the model's own forward path (prefill),
then each step decodes one token per sequence through `_decode_step`.

The decode step is built for small models on a CPU, where a step costs the number of PyTorch
operations it dispatches, and how many weights they stream through the cache, more than their
arithmetic: every input is checked once before the loop; the rotary tables and the padding
bias are made once; the weights are laid out once per call for the step (`_LayerWeights`:
projections transposed for ``torch.mm``, query/key/value fused with their rotate-half rows);
keys and values go into a static `KVCache` (zero-filled, preallocated for prompt + new tokens,
written in place with ``index_copy_``); eager steps attend to the filled slots only, compiled
ones to the whole cache under an additive mask, so that every step has the same shapes (what
``torch.compile`` needs), and on a GPU the compiled step is replayed as one CUDA graph
(`GraphedStep`); the MoE layers skip the module's sort-and-split dispatch (`_experts_step`).
benchmarks/generate.py measures it against transformers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._errors import InvalidArgumentError
from .layers import rotary_cos_sin
from .moe.moe_experts import SparseMoeBlock, _dense_swiglu, _grouped_mm_swiglu
from .step_graph import GraphedStep

Compile = bool | Literal["auto"]
CACHE_STEP = 64
# up to this many bytes of weights, generate copies them into the step's layout (`_LayerWeights`);
# a larger model (a Mixtral checkpoint) decodes through views of its own weights instead
LAYOUT_COPY_LIMIT = 256 * 2**20


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

    def __init__(
        self, config: CacheSizes, batch_size: int, max_length: int, device: torch.device, dtype: torch.dtype
    ) -> None:
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


@dataclass(frozen=True)
class GenerationOptions:
    """How `generate` continues a prompt, made once from `MoETransformer.generate`'s keywords
    (which document each) and passed whole to the decode loop; checked when made, so a bad
    value is named before any model work."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    eos_token_id: int | None = None
    generator: torch.Generator | Sequence[torch.Generator] | None = None
    on_token: Callable[[torch.Tensor], None] | None = None
    compile: Compile = "auto"

    def __post_init__(self) -> None:
        check_options(self.max_new_tokens, self.temperature, self.top_k, self.top_p, self.compile)


def generate(
    model: nn.Module, input_ids: torch.Tensor, options: GenerationOptions, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """`MoETransformer.generate`, which documents the arguments; ``model`` has been checked
    to be a causal model with its lm head, ``options`` when they were made."""
    model._check_input(input_ids, attention_mask, 0)
    _check_prompt(model, input_ids, attention_mask)
    _check_generators(options.generator, input_ids.shape[0])
    if options.max_new_tokens == 0:
        return input_ids.clone()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
    with torch.inference_mode():  # fewer per-operation costs than no_grad; the result leaves as a normal tensor
        compiled = _use_compile(options.compile, input_ids.device)
        tokens = _decode(model, input_ids, attention_mask.bool(), options, compiled)
    return torch.cat(tokens, dim=1)


def _decode(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, options: GenerationOptions, compiled: bool
) -> list[torch.Tensor]:
    """The prompt and each step's new tokens, (N, L) then (N, 1) each: `generate`'s loop."""
    batch, length = input_ids.shape
    # positions count real tokens only (as transformers' generate does), so a left-padded
    # prompt continues exactly as it would alone
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
    max_length = length + options.max_new_tokens
    if compiled:  # cache sizes in steps of CACHE_STEP: a compiled step serves many prompt lengths
        max_length = -(-max_length // CACHE_STEP) * CACHE_STEP
    cache = _allocate_cache(model, batch, max_length, input_ids.device, options.max_new_tokens)
    logits = _prefill(model, input_ids, attention_mask, positions, cache)
    rope = _rope_table(model, max_length, input_ids.device)
    copy = sum(p.numel() * p.element_size() for p in model.parameters()) <= LAYOUT_COPY_LIMIT
    weights = [_LayerWeights(block, rope is not None, copy) for block in model.layers]
    bias = _padding_bias(attention_mask, max_length, compiled, cache.keys[0].dtype)
    step_fn = _compiled_decode_step() if compiled else _decode_step
    slot = torch.tensor([length], device=input_ids.device)
    position = positions[:, -1] + 1

    def decode_step(step: torch.Tensor, window: tuple[int, int], step_bias: torch.Tensor | None) -> torch.Tensor:
        step_rope = None if rope is None else (rope[0][position][:, None, None], rope[1][position][:, None, None])
        return step_fn(model, weights, step, slot, step_rope, window, step_bias, cache.keys, cache.values)

    if compiled and input_ids.device.type == "cuda":
        decode_step = GraphedStep(decode_step)
    tokens, finished = [input_ids], torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
    for new in range(options.max_new_tokens):
        step = _next_tokens(logits, options, finished)
        tokens.append(step[:, None])
        if new == options.max_new_tokens - 1 or (options.eos_token_id is not None and bool(finished.all())):
            break
        window, step_bias = _step_attention(
            bias, slot, length + new + 1, model.config.sliding_window, max_length, compiled
        )
        logits = decode_step(step, window, step_bias)
        slot += 1
        position += 1
    return tokens


def _allocate_cache(
    model: nn.Module, batch: int, max_length: int, device: torch.device, max_new_tokens: int
) -> KVCache:
    """The step's `KVCache`, or a ValueError that names its size and the fix when it does not
    fit (the allocator's own message names neither cause nor fix)."""
    try:
        return KVCache(model.config, batch, max_length, device, model.embed_tokens.weight.dtype)
    except (RuntimeError, MemoryError) as error:
        config, itemsize = model.config, model.embed_tokens.weight.element_size()
        size = 2 * config.num_layers * batch * config.num_kv_heads * max_length * config.attention_head_dim * itemsize
        raise InvalidArgumentError(
            f"the key/value cache for {batch} x {max_length} positions ({size / 2**30:.1f} GiB) does not fit in "
            f"memory: ask for fewer new tokens (max_new_tokens={max_new_tokens}) or a smaller batch"
        ) from error


def _padding_bias(
    attention_mask: torch.Tensor, max_length: int, compiled: bool, dtype: torch.dtype
) -> torch.Tensor | None:
    """Additive attention bias over every cache slot, (N, 1, 1, max_length): -inf at the
    prompt's padding and (compiled) at the slots not yet filled; None for an eager step
    without padding. Additive, because SDPA converts a boolean mask at every call."""
    if not compiled and attention_mask.all():
        return None
    batch, length = attention_mask.shape
    unfilled = attention_mask.new_full((batch, max_length - length), not compiled)
    padding = torch.cat([attention_mask, unfilled], dim=1)
    return torch.zeros_like(padding, dtype=dtype).masked_fill(~padding, -math.inf)[:, None, None]


def _next_tokens(logits: torch.Tensor, options: GenerationOptions, finished: torch.Tensor) -> torch.Tensor:
    """This step's tokens (N,), sampled from ``logits``; a finished row repeats the eos token,
    and a row that emits it is marked in ``finished`` (in place). Streams them to
    ``options.on_token``."""
    step = _sample(logits, options.temperature, options.top_k, options.top_p, options.generator)
    if options.eos_token_id is not None:
        step = step.masked_fill(finished, options.eos_token_id)
        finished |= step == options.eos_token_id
    if options.on_token is not None:
        with torch.inference_mode(False):  # a normal tensor, which the caller may modify
            options.on_token(step[:, None].clone())
    return step


def _step_attention(
    bias: torch.Tensor | None, slot: torch.Tensor, end: int, sliding_window: int | None, max_length: int, compiled: bool
) -> tuple[tuple[int, int], torch.Tensor | None]:
    """The cache slots (start, end) a step attends to and its bias over them: eager steps read
    the filled slots in the window; compiled ones read every slot, ``bias`` updated in place
    (``slot`` filled, the slots before the window masked), the same shapes at every step."""
    start = 0 if sliding_window is None else max(0, end - sliding_window)
    if compiled:
        bias.index_fill_(-1, slot, 0.0)
        bias[..., :start] = -math.inf
        return (0, max_length), bias
    return (start, end), None if bias is None else bias[..., start:end]


def check_options(
    max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None, compile: Compile = False
) -> None:
    """Raises ValueError naming the values unless ``generate`` can take these options (the
    command line checks them before it loads a model)."""
    if not isinstance(max_new_tokens, int) or (top_k is not None and not isinstance(top_k, int)):
        raise InvalidArgumentError(f"max_new_tokens and top_k are whole numbers, got {max_new_tokens!r} and {top_k!r}")
    problems = [
        f"max_new_tokens must be 0 or more, got {max_new_tokens}" if max_new_tokens < 0 else "",
        f"temperature must be a finite number >= 0 (0: greedy), got {temperature}"
        if not 0 <= temperature < math.inf
        else "",
        f"top_k must be 1 or more, got {top_k}" if top_k is not None and top_k < 1 else "",
        f"top_p must be in (0, 1], got {top_p}" if top_p is not None and not 0 < top_p <= 1 else "",
    ]
    if any(problems):
        raise InvalidArgumentError("; ".join(filter(None, problems)))
    if compile not in (True, False, "auto"):
        raise InvalidArgumentError(f"compile must be True, False or 'auto', got {compile!r}")


def _check_generators(generator: torch.Generator | Sequence[torch.Generator] | None, batch: int) -> None:
    """One generator for the batch, or one per row."""
    if isinstance(generator, Sequence) and (
        len(generator) != batch or not all(isinstance(g, torch.Generator) for g in generator)
    ):
        raise InvalidArgumentError(
            f"generator is a torch.Generator or one per row of input_ids; got {len(generator)} items for {batch} rows"
        )


def _check_prompt(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
    """A prompt of at least one token, padded on the left if at all."""
    if input_ids.shape[1] == 0:
        bos = model.config.bos_token_id
        start = (
            f"start from the bos token id {bos}, e.g. torch.full((N, 1), {bos})"
            if bos is not None
            else "start from a beginning-of-sequence token, e.g. zoo.tokenizer.ByteTokenizer's "
            "bos_token_id: torch.full((N, 1), tokenizer.bos_token_id)"
        )
        raise InvalidArgumentError(
            f"generate needs a prompt of at least one token (input_ids of shape (N, L), L >= 1), "
            f"got shape {tuple(input_ids.shape)}; {start}"
        )
    if attention_mask is not None and input_ids.numel() and not attention_mask[:, -1].bool().all():
        raise InvalidArgumentError(
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


class _LayerWeights:
    """One block's weights laid out for a decode step. With ``copy`` (models up to
    LAYOUT_COPY_LIMIT bytes), every projection transposed to (in, out) and contiguous, for one
    ``torch.mm``/``torch.addmm`` each (``F.linear`` on the module's (out, in) weight ran up to
    twice as slow for one token), and the query, key and value projections fused with copies of
    the query and key rows in rotate-half order, so the rotary embedding is two elementwise
    operations; without, transposed views of the module's weights and its own projection, so
    that decoding needs no second copy of a large model. The experts' gate/up and down
    projections as (E, H, 2I) and (E, I, H)."""

    def __init__(self, block: nn.Module, rotary: bool, copy: bool) -> None:
        attention = block.self_attn
        layout: Callable[[torch.Tensor], torch.Tensor] = (lambda w: w.mT.contiguous()) if copy else (lambda w: w.mT)
        self.input_norm = block.input_layernorm.weight, block.input_layernorm.eps
        self.post_norm = block.post_attention_layernorm.weight, block.post_attention_layernorm.eps
        self.qkv = self.qkv_bias = None
        if copy and attention.q_norm is None:  # otherwise (and with qk_norm) Attention.project
            projections = (attention.q_proj, attention.k_proj, attention.v_proj)
            weight = torch.cat([p.weight for p in projections])
            bias = torch.cat([p.bias for p in projections]) if attention.q_proj.bias is not None else None
            if rotary:
                weight = torch.cat([weight, _rotate_half_rows(weight, attention)])
                bias = None if bias is None else torch.cat([bias, _rotate_half_rows(bias, attention)])
            self.qkv, self.qkv_bias = layout(weight), bias
        self.out = layout(attention.o_proj.weight)
        self.router = self.gate_up = self.down = None
        if block.is_moe:
            experts = block.mlp.experts
            self.router = layout(block.mlp.gate.weight)
            self.gate_up, self.down = layout(experts.gate_up_proj), layout(experts.down_proj)


def _rotate_half_rows(weight: torch.Tensor, attention: nn.Module) -> torch.Tensor:
    """The query and key rows of a fused projection weight (or bias) permuted and negated so
    that ``x @ rows.T`` is ``apply_rotary``'s rotate-half of the queries and keys."""
    heads = attention.num_heads + attention.num_kv_heads
    halves = weight[: heads * attention.head_dim].reshape(heads, 2, attention.head_dim // 2, *weight.shape[1:])
    return torch.stack([-halves[:, 1], halves[:, 0]], dim=1).reshape(heads * attention.head_dim, *weight.shape[1:])


def _decode_step(
    model: nn.Module,
    weights: list[_LayerWeights],
    tokens: torch.Tensor,
    slot: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
    window: tuple[int, int],
    bias: torch.Tensor | None,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
) -> torch.Tensor:
    """Next-token logits (N, V) in fp32 after ``tokens`` (N,), whose keys and values go into
    cache slot ``slot`` (a 1-element tensor), rotated by this step's ``rope`` (cos, sin), each
    (N, 1, 1, head_dim); attention reads the cache slots ``window`` (start, end) with the
    additive ``bias`` (N, 1, 1, end - start) over them (-inf at padding), or None."""
    h = model.embed_tokens.weight[tokens]  # (N, H): the residual stream stays 2-D
    for block, layer, k_cache, v_cache in zip(model.layers, weights, keys, values):
        x = _rms_norm(h, *layer.input_norm)
        q, k, v = _project(block.self_attn, layer, x, rope)
        k_cache.index_copy_(2, slot, k)
        v_cache.index_copy_(2, slot, v)
        start, end = window
        attention = block.self_attn
        out = F.scaled_dot_product_attention(
            q,
            k_cache[:, :, start:end],
            v_cache[:, :, start:end],
            attn_mask=bias,
            enable_gqa=attention.num_kv_heads != attention.num_heads,
        )
        h = torch.addmm(h, out.reshape(h.shape[0], layer.out.shape[0]), layer.out)  # not -1: ambiguous for 0 rows
        x = _rms_norm(h, *layer.post_norm)
        h = h + (_experts_step(block.mlp, layer, x) if block.is_moe else block.mlp(x))
    return torch.mm(_rms_norm(h, model.norm.weight, model.norm.eps), model.lm_head.weight.t()).float()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``nn.RMSNorm`` of ``x`` (N, H): for fp32 a few elementwise operations, which were
    faster per step than ``F.rms_norm`` (benchmarks/generate.py); lower precisions take
    ``F.rms_norm``, which accumulates in fp32."""
    if x.dtype != torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True).add_(eps)) * weight


def _project(
    attention: nn.Module, layer: _LayerWeights, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries (N, heads, 1, head_dim), keys and values (N, kv_heads, 1, head_dim) of one
    token per sequence ``x`` (N, H), through the layer's fused projection."""
    if layer.qkv is None:
        return attention.project(x[:, None], rope)
    heads, kv_heads, head_dim = attention.num_heads, attention.num_kv_heads, attention.head_dim
    projected = torch.mm(x, layer.qkv) if layer.qkv_bias is None else torch.addmm(layer.qkv_bias, x, layer.qkv)
    if attention.clip_qkv is not None:  # commutes with the rotate-half permutation and negation
        projected = projected.clamp(-attention.clip_qkv, attention.clip_qkv)
    width = (heads + 2 * kv_heads) * head_dim
    qkv = projected[:, :width].view(
        x.shape[0], heads + 2 * kv_heads, 1, head_dim
    )  # one position: (N, L, ...) = (N, ..., L)
    qk, v = qkv[:, : heads + kv_heads], qkv[:, heads + kv_heads :]
    if rope is not None:
        rotated_half = projected[:, width:].view(x.shape[0], heads + kv_heads, 1, head_dim)
        qk = torch.addcmul(qk * rope[0], rotated_half, rope[1])
    return qk[:, :heads], qk[:, heads:], v


def _experts_step(moe: SparseMoeBlock, layer: _LayerWeights, x: torch.Tensor) -> torch.Tensor:
    """The MoE layer on the step's tokens ``x`` (N, H): one token straight through its top-k
    experts; more through ``F.grouped_mm`` on the token slots sorted by expert (one call per
    projection, no padding; on a 2-core AVX2 CPU 1.0-1.25x a batched product over capacity-padded
    experts at batch 8, and without Python's per-expert loop), or the layer's own dispatch where
    torch has no grouped_mm; under torch.compile (no data-dependent shapes) every expert on every
    token, the unchosen ones weighted 0."""
    logits = torch.mm(x, layer.router)
    if moe.norm_topk_prob:  # the softmax of the top-k logits: the renormalised top-k probabilities
        top, index = logits.topk(moe.top_k, dim=-1)
        weights = top.float().softmax(dim=-1)
    else:
        weights, index = logits.float().softmax(dim=-1).topk(moe.top_k, dim=-1)
    weights = weights.to(x.dtype)
    if torch.compiler.is_compiling():
        mix = x.new_zeros(x.shape[0], moe.experts.num_experts).scatter_(1, index, weights)
        out = _dense_swiglu(x, mix, layer.gate_up.mT, layer.down.mT)
    elif x.shape[0] == 1:
        out = None
        for weight, expert in zip(weights[0].tolist(), index[0].tolist()):
            y = _swiglu(x, layer.gate_up[expert], layer.down[expert]).mul_(weight)
            out = y if out is None else out.add_(y)
    elif hasattr(F, "grouped_mm"):
        slots = index.flatten()
        order = slots.argsort(stable=True)  # by expert, then by token: transformers' order of sums
        tokens = order // moe.top_k
        sizes = torch.bincount(slots, minlength=moe.experts.num_experts)
        y = _grouped_mm_swiglu(x[tokens], sizes, layer.gate_up.mT, layer.down.mT)
        out = torch.zeros_like(x).index_add_(0, tokens, y.mul_(weights.flatten()[order, None]))
    else:
        out = moe.experts(x, index, weights)
    if moe.shared_expert is not None:
        out = out + torch.sigmoid(moe.shared_expert_gate(x)) * moe.shared_expert(x)
    return out


def _swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """One expert on tokens ``x`` (T, H), its weights laid out (H, 2I) and (I, H)."""
    projected = torch.mm(x, gate_up)
    inter = down.shape[0]
    return torch.mm(F.silu(projected[:, :inter]).mul_(projected[:, inter:]), down)


@functools.cache
def _compiled_decode_step() -> Callable[..., torch.Tensor]:
    """`_decode_step` through torch.compile with static shapes (compiled on first use per
    model and cache size)."""
    return torch.compile(_decode_step, dynamic=False)


def _sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | Sequence[torch.Generator] | None,
) -> torch.Tensor:
    """Next token per row of ``logits`` (N, V); with one generator per row, each row draws
    from its own, so its tokens do not depend on its batchmates'. Numerically safe for any
    options `check_options` lets through: a row whose scaled logits are not finite (a
    temperature too small to divide by, see `_greedy_rows`) takes its most likely token."""
    if temperature == 0 or temperature < torch.finfo(logits.dtype).tiny:  # 0 in logits' dtype: greedy
        return logits.argmax(dim=-1)
    best = logits.nan_to_num(-math.inf).argmax(dim=-1)
    logits = logits / temperature
    greedy = _greedy_rows(logits)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p  # the tokens after the nucleus
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, -math.inf))
    probs = logits.softmax(dim=-1)
    greedy |= ~torch.isfinite(probs).all(dim=-1)
    # such a row becomes one-hot at its best token, which multinomial draws (never seeing inf or NaN)
    probs = torch.where(greedy[:, None], torch.zeros_like(probs).scatter_(1, best[:, None], 1.0), probs)
    if isinstance(generator, Sequence):
        return torch.cat([torch.multinomial(row[None], 1, generator=g)[:, 0] for row, g in zip(probs, generator)])
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _greedy_rows(scaled: torch.Tensor) -> torch.Tensor:
    """The rows (N,) of logits divided by the temperature that overflowed the dtype (+-inf or
    NaN where the model gave a number: the temperature was too small to divide by) or hold no
    finite value at all: they sample greedily."""
    return ~torch.isfinite(scaled).any(dim=-1) | (torch.isnan(scaled) | torch.isposinf(scaled)).any(dim=-1)
