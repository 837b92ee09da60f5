"""Byte-level tokenizer for the language models zoo trains itself: every UTF-8 byte is a
token (ids 0-255), plus padding, beginning- and end-of-sequence tokens. No vocabulary file, no
unknown tokens, and any text round-trips exactly."""
from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.nn as nn


class ByteTokenizer:
    """Text <-> token ids over the 256 byte values plus ``pad_token_id`` (256),
    ``bos_token_id`` (257) and ``eos_token_id`` (258); ``vocab_size`` is 259, the default
    vocabulary of zoo's MoE language models."""

    pad_token_id = 256
    bos_token_id = 257
    eos_token_id = 258
    vocab_size = 259

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """The UTF-8 bytes of ``text`` as ids, optionally framed by bos / eos."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}; use decode for ids")
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id] * add_bos + ids + [self.eos_token_id] * add_eos

    def decode(self, ids: Sequence[int] | torch.Tensor, stop_at_eos: bool = True) -> str:
        """Text from ids: special tokens are skipped (and everything after the first eos when
        ``stop_at_eos``); byte sequences that are not valid UTF-8, as a sampled model can
        produce, become U+FFFD."""
        if isinstance(ids, torch.Tensor):
            if ids.ndim != 1:
                raise ValueError(f"decode takes one sequence (1-D ids), got shape {tuple(ids.shape)}; use decode_batch")
            ids = ids.tolist()
        data = bytearray()
        for i in ids:
            if i == self.eos_token_id and stop_at_eos:
                break
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if i < 256:
                data.append(i)
        return data.decode("utf-8", errors="replace")

    def decode_batch(self, ids: torch.Tensor | Sequence[Sequence[int]], stop_at_eos: bool = True) -> list[str]:
        return [self.decode(row, stop_at_eos) for row in ids]

    def __call__(
        self,
        texts: str | Sequence[str],
        add_bos: bool = False,
        add_eos: bool = False,
        max_length: int | None = None,
        padding_side: Literal["right", "left"] = "right",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A padded batch: ``input_ids`` and ``attention_mask`` (1 for tokens, 0 for padding),
        both int64 of shape (N, longest text or max_length). Texts longer than ``max_length``
        are truncated (keeping the end when padding on the left, as for generation prompts)."""
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be positive, got {max_length}")
        batch = [self.encode(t, add_bos, add_eos) for t in ([texts] if isinstance(texts, str) else texts)]
        if max_length is not None:
            batch = [ids[-max_length:] if padding_side == "left" else ids[:max_length] for ids in batch]
        length = max((len(ids) for ids in batch), default=0)
        input_ids = torch.full((len(batch), length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
        for row, ids in enumerate(batch):
            span = slice(length - len(ids), length) if padding_side == "left" else slice(0, len(ids))
            input_ids[row, span] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, span] = 1
        return input_ids, attention_mask


def complete(
    model: nn.Module,
    prompt: str,
    max_new_tokens: int,
    seed: int = 0,
    stream: Callable[[str], None] | None = None,
    **sampling: Any,
) -> str:
    """``prompt`` continued by a byte-level language model's ``generate`` (``sampling``:
    temperature, top_k, top_p), up to ``max_new_tokens`` bytes or the end of the file. The
    prompt is preceded by eos, which separates files in the training corpus: the model
    continues it as the start of a file. ``stream`` receives the text as it is generated
    (whole UTF-8 characters; the final eos is not sent)."""
    tokenizer = ByteTokenizer()
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not hasattr(model, "generate") or vocab_size != tokenizer.vocab_size:
        raise ValueError(f"{type(model).__name__} is not a byte-level language model (vocabulary {vocab_size}, "
                         f"not {tokenizer.vocab_size}); use one such as moe_lm.stdlib")
    device = next(model.parameters()).device
    ids = torch.tensor([[tokenizer.eos_token_id, *tokenizer.encode(prompt)]], device=device)
    generator = torch.Generator(device).manual_seed(seed)
    on_token = None
    if stream is not None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def on_token(step: torch.Tensor) -> None:
            token = int(step[0, 0])
            if token < 256:
                stream(decoder.decode(bytes([token])))

    out = model.generate(ids, max_new_tokens, eos_token_id=tokenizer.eos_token_id, generator=generator,
                         on_token=on_token, **sampling)
    return tokenizer.decode(out[0, 1:])
