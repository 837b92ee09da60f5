"""Byte-level tokenizer for the language models zoo trains itself: every UTF-8 byte is a
token (ids 0-255), plus padding, beginning- and end-of-sequence tokens. No vocabulary file, no
unknown tokens, and any text round-trips exactly. `ByteTokenizer.hf_files` describes the same
tokenizer in Hugging Face's files, which `zoo.export_hf` writes next to the weights."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn as nn

from zoo.errors import InvalidArgumentError


def _byte_characters() -> list[str]:
    """GPT-2's printable stand-in character for each byte value (the ByteLevel pre-tokenizer's
    table): printable Latin-1 bytes stand for themselves, the others for code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


_BYTE_CHARACTERS = _byte_characters()


class ByteTokenizer:
    """Text <-> token ids over the 256 byte values plus ``pad_token_id`` (256),
    ``bos_token_id`` (257) and ``eos_token_id`` (258); ``vocab_size`` is 259, the default
    vocabulary of zoo's MoE language models."""

    pad_token_id = 256
    bos_token_id = 257
    eos_token_id = 258
    vocab_size = 259
    special_tokens = {
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
    }  # their names in Hugging Face files
    hf_file_names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """The UTF-8 bytes of ``text`` as ids, optionally framed by bos / eos. Bytes that are not
        UTF-8, which Python decodes from a command line or file name as lone surrogates
        (``surrogateescape``), are taken back as those bytes."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"encode takes a str, got {type(text).__name__}; use decode for ids")
        ids = list(text.encode("utf-8", "surrogateescape"))
        return [self.bos_token_id] * add_bos + ids + [self.eos_token_id] * add_eos

    def decode(self, ids: Sequence[int] | torch.Tensor, stop_at_eos: bool = True) -> str:
        """Text from ids: special tokens are skipped (and everything after the first eos when
        ``stop_at_eos``); byte sequences that are not valid UTF-8, as a sampled model can
        produce, become U+FFFD."""
        if isinstance(ids, torch.Tensor):
            if ids.ndim != 1:
                raise InvalidArgumentError(
                    f"decode takes one sequence (1-D ids), got shape {tuple(ids.shape)}; use decode_batch"
                )
            ids = ids.tolist()
        data = bytearray()
        for i in ids:
            if i == self.eos_token_id and stop_at_eos:
                break
            if not 0 <= i < self.vocab_size:
                raise InvalidArgumentError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if i < 256:
                data.append(i)
        return data.decode("utf-8", errors="replace")

    def decode_batch(self, ids: torch.Tensor | Sequence[Sequence[int]], stop_at_eos: bool = True) -> list[str]:
        return [self.decode(row, stop_at_eos) for row in ids]

    def hf_files(self, model_max_length: int) -> dict[str, dict[str, Any]]:
        """tokenizer.json, tokenizer_config.json and special_tokens_map.json (name -> JSON content)
        for which ``transformers.AutoTokenizer.from_pretrained`` loads a fast tokenizer that gives
        these ids: ``tokenizer(text)`` is ``[eos_token_id] + encode(text)``, the prompt `complete`
        feeds a model (files end with eos in training), and ``add_special_tokens=False`` gives
        ``encode(text)``; special-token names in the text stay bytes, and ``decode(ids,
        skip_special_tokens=True)`` equals ``decode(ids, stop_at_eos=False)``.

        Each byte is one token of a BPE model without merges, after the ByteLevel pre-tokenizer
        (GPT-2's byte-to-character table; no regex split, no prefix space), so token b is byte b."""
        added = self._hf_added_tokens()
        tokenizer = self._hf_tokenizer_json(added)
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",  # not the Llama tokenizer Mixtral's model type implies
            **self.special_tokens,
            "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
            "model_max_length": model_max_length,
            "padding_side": "right",
            "clean_up_tokenization_spaces": False,
            "split_special_tokens": True,  # "</s>" typed in a text is four bytes, as in encode
        }
        return dict(zip(self.hf_file_names, (tokenizer, config, dict(self.special_tokens))))

    def _hf_added_tokens(self) -> list[dict[str, Any]]:
        """The special tokens as tokenizer.json's ``added_tokens``."""
        specials = [
            (self.pad_token_id, "pad_token"),
            (self.bos_token_id, "bos_token"),
            (self.eos_token_id, "eos_token"),
        ]
        flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        return [{"id": i, "content": self.special_tokens[role], **flags} for i, role in specials]

    def _hf_tokenizer_json(self, added: list[dict[str, Any]]) -> dict[str, Any]:
        """tokenizer.json: a BPE model without merges over GPT-2's byte characters, eos prepended."""
        eos = self.special_tokens["eos_token"]
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}

        def template(*parts: str) -> list[dict[str, Any]]:
            return [
                {"SpecialToken": {"id": eos, "type_id": 0}} if p == eos else {"Sequence": {"id": p, "type_id": 0}}
                for p in parts
            ]

        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": byte_level,
            "post_processor": {
                "type": "TemplateProcessing",
                "single": template(eos, "A"),
                "pair": template(eos, "A", eos, "B"),
                "special_tokens": {eos: {"id": eos, "ids": [self.eos_token_id], "tokens": [eos]}},
            },
            "decoder": byte_level,
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": {char: byte for byte, char in enumerate(_BYTE_CHARACTERS)},
                "merges": [],
            },
        }

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
            raise InvalidArgumentError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
        if max_length is not None and max_length < 1:
            raise InvalidArgumentError(f"max_length must be positive, got {max_length}")
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


def check_byte_lm(model: nn.Module, name: str | None = None) -> None:
    """Refuse, before any text is written, a model that is not a byte-level language model
    with its lm head (``zoo generate`` and ``zoo serve`` both ask here); ``name`` names it."""
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    head = getattr(model, "head", None)
    if not hasattr(model, "generate") or head != "lm" or vocab_size != ByteTokenizer.vocab_size:
        raise InvalidArgumentError(
            f"{name or type(model).__name__} is not a byte-level language model with its lm head (vocabulary "
            f"{vocab_size}, head {head!r}; needs {ByteTokenizer.vocab_size} and 'lm'): use one such as moe_lm.stdlib"
        )


@dataclass
class Continuation:
    """One prompt of `complete_batch` and how far it may go: up to ``max_new_tokens`` tokens,
    sampled with its own ``seed``. ``stream`` gets the text as it comes (whole UTF-8
    characters) and ends this row, not the others, by returning True."""

    prompt: str
    max_new_tokens: int
    seed: int = 0
    stream: Callable[[str], bool | None] | None = None


@dataclass
class Continued:
    """What `complete_batch` made of one `Continuation`: its ``text`` (without the prompt),
    the generated ``ids`` (eos included when it came), and why it ended: ``"eos"`` (the end
    of a file), ``"length"`` (max_new_tokens) or ``"stopped"`` (its stream said so)."""

    text: str = ""
    ids: list[int] = field(default_factory=list)
    finish: str = ""

    @property
    def text_tokens(self) -> int:
        """The tokens of ``text``: the generated bytes, eos not counted."""
        return sum(1 for i in self.ids if i < 256)


class _AllDone(Exception):
    """Raised from the token callback once every row of a batch has ended."""


class _Row:
    """A row's decoding while its batch generates."""

    def __init__(self, row: Continuation) -> None:
        self.row, self.out = row, Continued()
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def take(self, token: int) -> None:
        if self.out.finish:
            return
        self.out.ids.append(token)
        if token == ByteTokenizer.eos_token_id:
            return self._end("eos")
        if token < 256 and self._send(self.decoder.decode(bytes([token]))):
            return self._end("stopped")
        if len(self.out.ids) >= self.row.max_new_tokens:
            self._end("length")

    def _send(self, piece: str) -> bool:
        """Add ``piece`` to the text and stream it; whether the stream ended the row."""
        self.out.text += piece
        return bool(piece and self.row.stream is not None and self.row.stream(piece))

    def _end(self, finish: str) -> None:
        self.out.finish = finish
        if finish != "stopped":
            self._send(self.decoder.decode(b"", final=True))  # an unfinished character, as U+FFFD


def complete_batch(model: nn.Module, rows: Sequence[Continuation], **sampling: Any) -> list[Continued]:
    """The prompts of ``rows`` continued together by a byte-level language model's ``generate``
    (``sampling``: temperature, top_k, top_p), each up to its own limit, the end of a file or
    its stream's stop, in one batch: left-padded, each row sampling from its own generator, so
    that a row's tokens do not depend on its batchmates' (up to floating-point ties). Each
    prompt is preceded by eos, which separates files in the training corpus: the model
    continues it as the start of a file. Generation ends once every row has."""
    tokenizer = ByteTokenizer()
    check_byte_lm(model)
    if not rows:
        return []
    device = next(model.parameters()).device
    prompts = [[tokenizer.eos_token_id, *tokenizer.encode(row.prompt)] for row in rows]
    length = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], device=device)
    states = [_Row(row) for row in rows]
    for state in states:
        if state.row.max_new_tokens == 0:
            state.out.finish = "length"

    def on_token(step: torch.Tensor) -> None:
        for state, token in zip(states, step[:, 0].tolist()):
            state.take(token)
        if all(state.out.finish for state in states):
            raise _AllDone

    generators = [torch.Generator(device).manual_seed(row.seed) for row in rows]
    try:
        model.generate(
            ids,
            max(row.max_new_tokens for row in rows),
            eos_token_id=tokenizer.eos_token_id,
            generator=generators,
            on_token=on_token,
            attention_mask=mask,
            **sampling,
        )
    except _AllDone:
        pass
    return [state.out for state in states]


def complete(
    model: nn.Module,
    prompt: str,
    max_new_tokens: int,
    seed: int = 0,
    stream: Callable[[str], None] | None = None,
    **sampling: Any,
) -> str:
    """``prompt`` and its continuation by a byte-level language model (`complete_batch` with
    one row), up to ``max_new_tokens`` bytes or the end of the file. ``stream`` receives the
    continuation as it is generated (whole UTF-8 characters; the final eos is not sent)."""
    tokenizer = ByteTokenizer()
    (out,) = complete_batch(model, [Continuation(prompt, max_new_tokens, seed, stream)], **sampling)
    return tokenizer.decode([*tokenizer.encode(prompt), *out.ids])
