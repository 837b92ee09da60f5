"""The tokenizer files zoo.export_hf writes for byte-level language models: transformers'
AutoTokenizer loads them and tokenizes and decodes exactly as zoo.ByteTokenizer does, and
transformers' greedy generation from its ids continues moe_lm.stdlib as zoo's `complete` does."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")

import zoo  # noqa: E402
from zoo.interop.hf_export import export_hf  # noqa: E402
from zoo.tokenizer import ByteTokenizer, complete  # noqa: E402

BYTES = ByteTokenizer()
TINY = dict(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=32,
    num_experts=2,
    top_k=1,
    max_position_embeddings=64,
)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[object, object]:
    """(directory, AutoTokenizer) of a tiny byte-level moe_lm exported as Mixtral."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("byte_lm")
    export_hf(zoo.load("moe_lm", pretrained=False, **TINY), directory)
    return directory, transformers.AutoTokenizer.from_pretrained(directory)


@settings(max_examples=60, deadline=None)
@given(text=st.text())
@example(text="def f():\n\treturn '😀'\x00\r\n")
@example(text="  leading, trailing  and  double spaces . , ")
@example(text="</s><s><pad> typed special tokens")
@example(text="")
def test_text_tokenizes_as_byte_tokenizer(exported, text: str) -> None:
    _, tokenizer = exported
    assert tokenizer(text)["input_ids"] == [BYTES.eos_token_id, *BYTES.encode(text)]  # complete's prompt
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert plain == BYTES.encode(text)
    assert tokenizer.decode(plain) == text == tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, BYTES.vocab_size - 1), max_size=40))
@example(ids=[0xE2, 0x82, BYTES.pad_token_id, 0xAC, 0xFF, 0xC3, BYTES.eos_token_id, 0x28])
def test_any_ids_decode_as_byte_tokenizer(exported, ids: list[int]) -> None:
    """Special tokens skipped, invalid UTF-8 (as sampling can produce) replaced by U+FFFD alike."""
    _, tokenizer = exported
    assert tokenizer.decode(ids, skip_special_tokens=True) == BYTES.decode(ids, stop_at_eos=False)


def test_special_tokens_and_padded_batches(exported) -> None:
    directory, tokenizer = exported
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (256, 257, 258)
    assert len(tokenizer) == BYTES.vocab_size and tokenizer.model_max_length == TINY["max_position_embeddings"]
    texts = ["ab", "", "héllo"]
    batch = tokenizer(texts, padding=True, add_special_tokens=False, return_tensors="pt")
    input_ids, attention_mask = BYTES(texts)
    assert torch.equal(batch["input_ids"], input_ids) and torch.equal(batch["attention_mask"], attention_mask)
    # A model with another vocabulary gets no tokenizer files, and a re-export removes stale ones.
    export_hf(zoo.load("moe_lm", pretrained=False, **{**TINY, "vocab_size": 97}), directory)
    assert not any((directory / name).exists() for name in BYTES.hf_file_names)
    assert json.loads((directory / "config.json").read_text())["vocab_size"] == 97


def test_transformers_generate_continues_as_zoo_complete(tmp_path) -> None:
    model = zoo.load("moe_lm.stdlib")
    export_hf(model, tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    reference = transformers.MixtralForCausalLM.from_pretrained(tmp_path).eval()
    prompt = "# é 😀\nx = "  # multi-byte characters; the model continues with "'\\x11'     #"
    inputs = tokenizer(prompt, return_tensors="pt")
    out = reference.generate(
        **inputs,
        max_new_tokens=12,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    ours = complete(model, prompt, 12, temperature=0)
    assert len(ours) > len(prompt)
    assert tokenizer.decode(out[0], skip_special_tokens=True) == ours
