"""Mixture-of-experts transformers: a Mixtral-compatible decoder (``moe_lm``), a bidirectional
encoder for classification (``moe_encoder``) and a V-MoE-style image classifier (``moe_vit``):
the models and their builders. Their config (`MoEConfig`), output (`MoEOutput`), attention,
blocks and shared body are in moe_blocks.py and importable from here as before; the sparse MoE
layer (router, experts, routing losses) and the dense SwiGLU MLP are in moe_experts.py.

The blocks and parameter names (Hugging Face's Mixtral names, so Mixtral, Qwen2-MoE and OLMoE
checkpoints load by renaming keys) are described in moe_blocks.py.

Output: ``model(x)`` returns the logits, a Tensor, as every zoo model does. ``model(x,
return_aux=True)`` returns an `MoEOutput` instead: the logits plus the routing losses of that
forward pass (``aux_loss``, already weighted by the coefficients of the config, is what a
training loop adds to its task loss) and the share of token slots each expert received. The
routing losses come out of ``forward`` itself, because a side channel (losses left on the
module) would be lost under DistributedDataParallel, torch.compile and activation checkpointing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import generation
from .._errors import InvalidArgumentError
from .._registry import register_model
from ..features import FeatureInfo, Indices, check_output_fmt, feature_take_indices
from ..generation import Compile, KVCache
from ..layers import (
    ConvNormAct,
    PooledLinearClassifier,
    check_image_input,
    check_int_option,
    check_rate_option,
    fx_tracing,
    is_capturing,
    linear_classifier,
    rotary_cos_sin,
)
from .moe_blocks import Attention, Block, MoEConfig, MoEOutput, _attention_mask, _MoEBody  # noqa: F401 (re-exported)
from .moe_experts import is_tracing

TEXT_HEADS = ("lm", "sequence_classification", "token_classification")


# --------------------------------------------------------------------------- models


class MoETransformer(_MoEBody):
    """Token-level MoE transformer: causal (``moe_lm``) or bidirectional (``moe_encoder``),
    with one head: ``"lm"`` (next-token logits for a causal model, per-token vocabulary logits
    for masked-token training of an encoder), ``"sequence_classification"`` (the last real
    token's features for a causal model, the mean over real tokens for an encoder) or
    ``"token_classification"``.

    ``forward(input_ids, attention_mask=None)`` takes token ids (N, L) and an optional mask
    (N, L), 1 for real tokens and 0 for padding; it returns the logits (an `MoEOutput` with
    ``return_aux=True``).
    """

    def __init__(
        self,
        config: MoEConfig,
        head: str = "lm",
        num_classes: int | None = None,
        causal: bool = True,
        drop_rate: float = 0.0,
        name: str = "moe_lm",
    ) -> None:
        super().__init__(config, causal, name)
        if head not in TEXT_HEADS:
            raise InvalidArgumentError(f"head must be one of {', '.join(TEXT_HEADS)}; got {head!r}")
        check_rate_option("drop_rate", drop_rate)
        self.head = head
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.drop = nn.Dropout(drop_rate)
        self._init_weights()
        if num_classes is None:
            num_classes = config.vocab_size if head == "lm" else 2
        self.reset_classifier(num_classes)
        self.register_load_state_dict_post_hook(lambda module, _: module.tie_weights())

    def get_classifier(self) -> nn.Module:
        """The head's final layer: ``lm_head`` or ``classifier``."""
        return self.lm_head if self.head == "lm" else self.classifier

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh head: ``num_classes`` outputs for the classification heads; for the LM head
        the vocabulary size (tied to the embedding if the config says so) or 0 for features."""
        if self.head != "lm":
            self.classifier = linear_classifier(self.num_features, num_classes)
        elif num_classes == self.config.vocab_size:
            self.lm_head = nn.Linear(self.num_features, num_classes, bias=False)
            nn.init.normal_(self.lm_head.weight, std=self.config.initializer_range)
            self.tie_weights()
        elif num_classes == 0:
            self.lm_head = nn.Identity()
        else:
            raise InvalidArgumentError(
                f"the lm head predicts the {self.config.vocab_size} tokens of the vocabulary, so num_classes must be "
                f"{self.config.vocab_size} (or 0 for features), got {num_classes}; for labels use "
                "head='sequence_classification' or 'token_classification'"
            )
        self.num_classes = num_classes

    def tie_weights(self) -> None:
        """Share the LM head's weight with the token embedding if the config ties them (after
        loading with ``assign=True`` or moving off the meta device, which break the tie)."""
        if self.head == "lm" and self.config.tie_word_embeddings and isinstance(self.lm_head, nn.Linear):
            self.lm_head.weight = self.embed_tokens.weight

    def _check_input(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, past: int) -> None:
        """Raise a ValueError naming the fix unless ``input_ids`` are integer token ids (N, L)
        in the vocabulary and ``attention_mask`` covers the ``past`` cached and the new positions."""
        expected = f"{self.name} expects token ids of shape (N, L), an integer tensor"
        is_tensor = isinstance(input_ids, torch.Tensor)
        if not is_tensor or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            got = input_ids.dtype if is_tensor else type(input_ids).__name__
            raise InvalidArgumentError(f"{expected}; got {got}: encode text with zoo.tokenizer.ByteTokenizer first")
        if input_ids.ndim != 2:
            hint = "; add a batch dimension with x.unsqueeze(0)" if input_ids.ndim == 1 else ""
            raise InvalidArgumentError(
                f"{expected}; got a {input_ids.ndim}-D tensor of shape {tuple(input_ids.shape)}{hint}"
            )
        # on accelerators the check would cost a host sync, and a tracer cannot branch on values
        if input_ids.device.type == "cpu" and input_ids.numel() and not is_tracing():
            low, high = input_ids.min().item(), input_ids.max().item()
            if low < 0 or high >= self.config.vocab_size:
                raise InvalidArgumentError(
                    f"token ids must be in [0, {self.config.vocab_size}) (vocab_size), got ids in [{low}, {high}]"
                )
        if attention_mask is not None:
            want = (input_ids.shape[0], past + input_ids.shape[1])
            if tuple(attention_mask.shape) != want:
                raise InvalidArgumentError(
                    f"attention_mask must have shape {want} (batch, cached + new positions), "
                    f"got {tuple(attention_mask.shape)}"
                )

    def _encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: KVCache | None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Final hidden states and router logits; rotary ``positions`` (N, L) default to the
        cache slots the tokens fill."""
        past = cache.length if cache is not None else 0
        self._check_input(input_ids, attention_mask, past)
        if cache is not None and past + input_ids.shape[1] > cache.max_length:
            raise InvalidArgumentError(
                f"the cache holds {cache.max_length} positions; {past} used, {input_ids.shape[1]} more given"
            )
        h = self.embed_tokens(input_ids)
        length = input_ids.shape[1]
        rope = None
        if self.config.rope_theta is not None:
            if positions is None:
                positions = torch.arange(past, past + length, device=h.device)
            cos, sin = rotary_cos_sin(positions, self.config.attention_head_dim, self.config.rope_theta, h.dtype)
            rope = (cos, sin) if positions.ndim == 1 else (cos[:, None], sin[:, None])  # a position per row
        key_padding = attention_mask.bool() if attention_mask is not None else None
        mask, is_causal = _attention_mask(
            key_padding, length, past + length, self.causal, self.config.sliding_window, h.device
        )
        h, router_logits = self._run_layers(h, rope, mask, is_causal, cache)
        if cache is not None:
            cache.length += length
        return self.norm(h), router_logits

    def forward_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> torch.Tensor:
        """Final hidden states (N, L, hidden_size)."""
        return self._encode(input_ids, attention_mask, cache)[0]

    def forward_head(
        self, x: torch.Tensor, pre_logits: bool = False, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-token logits (N, L, C) for "lm" and "token_classification"; for
        "sequence_classification" the pooled features (N, hidden) go through the classifier."""
        if self.head == "sequence_classification":
            x = self._pool(x, attention_mask)
        return x if pre_logits else self.get_classifier()(self.drop(x))

    def _pool(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Sequence features (N, hidden) of ``x``: the last real token (causal) or the mean over
        real tokens (encoder)."""
        if x.shape[1] == 0:
            raise InvalidArgumentError(
                f"{self.name} with head 'sequence_classification' needs at least one token per sequence "
                f"(input_ids of shape (N, L) with L >= 1); got {x.shape[1]} tokens"
            )
        if attention_mask is None:
            return x[:, -1] if self.causal else x.mean(dim=1)
        mask = attention_mask[:, -x.shape[1] :].bool()
        if self.causal:  # the last real token has seen the whole sequence (left or right padding)
            last = mask.shape[1] - 1 - mask.flip(1).int().argmax(dim=1)
            return x[torch.arange(x.shape[0], device=x.device), last]
        weights = mask.to(x.dtype)[..., None]
        return (x * weights).sum(1) / weights.sum(1).clamp(min=1)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        return_aux: bool = False,
    ) -> torch.Tensor | MoEOutput:
        """Logits, or with ``return_aux`` an `MoEOutput` that adds the routing losses;
        ``cache`` (a `KVCache`) continues from earlier calls."""
        h, router_logits = self._encode(input_ids, attention_mask, cache)
        logits = self.forward_head(h, attention_mask=attention_mask)
        if not return_aux:
            return logits
        token_mask = attention_mask[:, -input_ids.shape[1] :] if attention_mask is not None else None
        return self._output(logits, router_logits, token_mask)

    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | None = None,
        generator: torch.Generator | Sequence[torch.Generator] | None = None,
        on_token: Callable[[torch.Tensor], None] | None = None,
        attention_mask: torch.Tensor | None = None,
        compile: Compile = "auto",
    ) -> torch.Tensor:
        """Continue the prompts ``input_ids`` (N, L) by up to ``max_new_tokens`` tokens, keeping
        keys and values in a static `KVCache` (generation.py). Prompts of different lengths are
        padded on the left, with ``attention_mask`` (N, L) 0 at the padding. Sampling from the
        softmax at ``temperature`` (0: greedy), over the ``top_k`` most likely tokens and the
        smallest set whose probability reaches ``top_p``, drawn with ``generator`` (or one per
        row: each row's draws then don't depend on its batchmates'). A sequence that emitted
        ``eos_token_id`` continues with it; generation stops once all have. ``on_token`` is
        called with each new step's tokens (N, 1) as it is produced, to stream them.
        ``compile``: run the decode step through torch.compile (True), or not (False);
        ``"auto"`` compiles on accelerators only. Returns (N, L + new)."""
        if self.head != "lm" or not self.causal or not isinstance(self.lm_head, nn.Linear):
            raise InvalidArgumentError(
                f"generate needs a causal model with its lm head; this {self.name} has head {self.head!r}"
            )
        options = generation.GenerationOptions(
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            eos_token_id=eos_token_id,
            generator=generator,
            on_token=on_token,
            compile=compile,
        )
        return generation.generate(self, input_ids, options, attention_mask)


class MoEViT(PooledLinearClassifier, _MoEBody):
    """V-MoE-style image classifier (Riquelme et al., 2021): non-overlapping patches, learned
    position embeddings, bidirectional MoE blocks, mean pooling over patches, linear head.
    ``img_size`` fixes the position grid; other sizes (multiples of ``patch_size``) resize it
    bicubically, as timm does. ``stem_channels`` replaces the single patchifying convolution
    by stride-2 3x3 conv-BN-ReLU layers of those widths and a 1x1 projection (Xiao et al.,
    2021, "Early convolutions help transformers see better"); ``patch_size`` is then
    2 ** len(stem_channels). ``global_pool`` pools the tokens (timm's types: avg, max, avgmax,
    catavgmax)."""

    pool_dims = (1,)

    def __init__(
        self,
        config: MoEConfig,
        img_size: int = 28,
        patch_size: int = 4,
        in_chans: int = 1,
        num_classes: int = 10,
        drop_rate: float = 0.0,
        name: str = "moe_vit",
        stem_channels: Sequence[int] = (),
        global_pool: str = "avg",
    ) -> None:
        super().__init__(config, causal=False, name=name)
        check_int_option("in_chans", in_chans, what=" (the image channels: 1 gray, 3 RGB)")
        check_int_option("img_size", img_size)
        check_int_option("patch_size", patch_size)
        check_rate_option("drop_rate", drop_rate)
        for width in stem_channels:
            check_int_option("stem_channels", width, what=" (each width)")
        if stem_channels and patch_size != 2 ** len(stem_channels):
            raise InvalidArgumentError(
                f"a stem of {len(stem_channels)} stride-2 convolutions makes {2 ** len(stem_channels)}-pixel "
                f"patches; set patch_size={2 ** len(stem_channels)} (got {patch_size})"
            )
        if img_size % patch_size:
            raise InvalidArgumentError(f"img_size ({img_size}) must be a multiple of patch_size ({patch_size})")
        self.in_chans, self.patch_size, self.grid = in_chans, patch_size, img_size // patch_size
        self.min_input_size = patch_size  # and sides must be multiples of it
        if stem_channels:
            widths = (in_chans, *stem_channels)
            self.first_conv = "patch_embed.0.0"
            self.patch_embed: nn.Module = nn.Sequential(
                *(ConvNormAct(widths[i], widths[i + 1], 3, stride=2) for i in range(len(stem_channels))),
                nn.Conv2d(widths[-1], config.hidden_size, 1),
            )
        else:
            self.first_conv = "patch_embed"
            self.patch_embed = nn.Conv2d(in_chans, config.hidden_size, patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.empty(1, self.grid * self.grid, config.hidden_size))
        self.drop = nn.Dropout(drop_rate)
        self.feature_info = FeatureInfo(
            [
                dict(num_chs=config.hidden_size, reduction=patch_size, module=f"layers.{i}")
                for i in range(config.num_layers)
            ]
        )
        self._init_weights()
        for module in self.patch_embed.modules():  # PyTorch's conv and BatchNorm defaults, not the projections'
            if isinstance(module, (nn.Conv2d, nn.BatchNorm2d)):
                module.reset_parameters()
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.zeros_(self.patch_embed.bias if not stem_channels else self.patch_embed[-1].bias)
        self.reset_classifier(num_classes, global_pool)

    def _embed(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Patch tokens (N, patches, hidden) with their position embeddings (resized for other
        grids), and the patch grid."""
        if fx_tracing():
            raise InvalidArgumentError(
                f"{self.name} cannot be traced by torch.fx (symbolic_trace, create_feature_extractor, feature_cls='fx'): "
                "its position grid follows the input's size and its experts' token groups follow the routing, "
                "both decided by the data. Use forward_intermediates (features_only=True) for its feature maps, "
                "and torch.export or torch.jit.trace to capture it"
            )
        first_conv = self.get_submodule(self.first_conv)
        check_image_input(x, self.in_chans, self.patch_size, self.name, first_conv.weight.dtype)
        if not is_capturing() and (x.shape[2] % self.patch_size or x.shape[3] % self.patch_size):
            raise InvalidArgumentError(
                f"{self.name} expects image sides that are multiples of patch_size={self.patch_size}; "
                f"got {tuple(x.shape)}"
            )
        x = self.patch_embed(x)
        grid = (x.shape[2], x.shape[3])
        pos = self.pos_embed
        if grid != (self.grid, self.grid):
            pos = pos.reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
            pos = F.interpolate(pos, size=grid, mode="bicubic", align_corners=False).flatten(2).transpose(1, 2)
        return x.flatten(2).transpose(1, 2) + pos, grid

    def _encode(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Final normed patch tokens and the router logits."""
        h, _ = self._embed(x)
        h, router_logits = self._run_layers(h, None, None, False)
        return self.norm(h), router_logits

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: Indices = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """timm's (as its ViTs): the outputs of the blocks ``indices`` (None all, an int n the
        last n, a list those blocks), as token maps (N, hidden, H / patch, W / patch) or with
        ``output_fmt="NLC"`` as tokens (N, patches, hidden), after the final norm if ``norm``;
        unless ``intermediates_only``, first the final normed tokens (N, patches, hidden),
        those of the deepest block asked for with ``stop_early``."""
        check_output_fmt(output_fmt, ("NCHW", "NLC"))
        take, deepest = feature_take_indices(len(self.layers), indices)
        last = deepest if stop_early or intermediates_only else len(self.layers) - 1
        h, grid = self._embed(x)
        intermediates = []
        for i, layer in enumerate(self.layers[: last + 1]):
            h, _ = layer(h, None, None, False)
            if i in take:
                tokens = self.norm(h) if norm else h
                nchw = tokens.transpose(1, 2).reshape(h.shape[0], h.shape[2], *grid)
                intermediates.append(nchw if output_fmt == "NCHW" else tokens)
        return intermediates if intermediates_only else (self.norm(h), intermediates)

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's: drop the blocks after the deepest of ``indices``, the final norm with
        ``prune_norm``, and with ``prune_head`` the head (no pooling, no classifier). Returns
        the blocks asked for, as absolute indices."""
        take, deepest = feature_take_indices(len(self.layers), indices)
        self.layers = self.layers[: deepest + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "")
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Final patch tokens (N, patches, hidden_size)."""
        return self._encode(x)[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pooling over patches (``global_pool``), then (unless ``pre_logits``) dropout and the classifier."""
        x = self.global_pool(x)
        return x if pre_logits else self.classifier(self.drop(x))

    def forward(self, x: torch.Tensor, return_aux: bool = False) -> torch.Tensor | MoEOutput:
        """Logits, or with ``return_aux`` an `MoEOutput` that adds the routing losses."""
        h, router_logits = self._encode(x)
        logits = self.forward_head(h)
        return self._output(logits, router_logits, None) if return_aux else logits


# --------------------------------------------------------------------------- registered architectures


def _text_model(
    name: str, causal: bool, head: str, num_classes: int | None, drop_rate: float, kwargs: dict[str, Any]
) -> MoETransformer:
    """A `MoETransformer` from a text builder's keyword arguments (the config's fields)."""
    return MoETransformer(MoEConfig.from_kwargs(kwargs), head, num_classes, causal, drop_rate, name)


@register_model(inputs="text", heads=TEXT_HEADS, finetune_head="sequence_classification", hf_checkpoints=True)
def moe_lm(head: str = "lm", num_classes: int | None = None, drop_rate: float = 0.0, **kwargs: Any) -> MoETransformer:
    """Causal MoE language model (Mixtral architecture); defaults: 4 layers, hidden 256,
    8 experts of which 2 per token, byte-level vocabulary (zoo.tokenizer)."""
    return _text_model("moe_lm", True, head, num_classes, drop_rate, kwargs)


@register_model(
    inputs="text",
    heads=("sequence_classification", "token_classification", "lm"),
    finetune_head="sequence_classification",
    finetune_example="moe_encoder",
    hf_checkpoints=True,
)
def moe_encoder(
    head: str = "sequence_classification", num_classes: int | None = None, drop_rate: float = 0.0, **kwargs: Any
) -> MoETransformer:
    """Bidirectional MoE encoder for classification (the moe_lm blocks without the causal
    mask); "lm" gives per-token vocabulary logits for masked-token pretraining."""
    return _text_model("moe_encoder", False, head, num_classes, drop_rate, kwargs)


@register_model
def moe_vit(
    img_size: int = 28,
    patch_size: int = 4,
    in_chans: int = 1,
    num_classes: int = 10,
    drop_rate: float = 0.0,
    stem_channels: Sequence[int] = (),
    global_pool: str = "avg",
    **kwargs: Any,
) -> MoEViT:
    """V-MoE-style image classifier; defaults for 28 px grayscale images (Fashion-MNIST): 4x4
    patches, 6 layers of hidden size 128 with 8 experts (top-2) in every other layer;
    ``stem_channels=(32, 64)`` makes the 4x4 patches with a convolutional stem instead."""
    defaults = dict(hidden_size=128, num_layers=6, num_heads=4, num_kv_heads=4, intermediate_size=256, rope_theta=None)
    options = {**defaults, **kwargs}
    options.setdefault("dense_layers", tuple(range(0, options["num_layers"], 2)))
    return MoEViT(
        MoEConfig.from_kwargs(options),
        img_size,
        patch_size,
        in_chans,
        num_classes,
        drop_rate,
        stem_channels=tuple(stem_channels),
        global_pool=global_pool,
    )
