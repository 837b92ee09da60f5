"""Generation of the MoE language model (architectures/generation.py): greedy decoding through
the static cache equals the argmax of full forward passes and transformers' greedy generate,
left-padded batches continue each prompt as it would continue alone, streaming sees every
token in order, and bad arguments are refused with the fix."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from zoo.architectures import generation
from zoo.tokenizer import ByteTokenizer, Continuation, complete, complete_batch

TINY = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=24, num_experts=4, top_k=2)
VARIANTS = {
    "mixtral": {},
    "sliding-window": dict(sliding_window=3),
    "qkv-bias-clip-shared-dense": dict(qkv_bias=True, clip_qkv=0.5, shared_expert_size=16, dense_layers=(1,)),
    "qk-norm-tied": dict(qk_norm=True, tie_word_embeddings=True, norm_topk_prob=False),
}


def tiny_lm(**options) -> torch.nn.Module:
    """A random tiny moe_lm with weights large enough that tokens and routing vary."""
    torch.manual_seed(0)
    model = zoo.load("moe_lm", pretrained=False, **{**TINY, **options})
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim > 1:
                param.normal_(std=0.15)
    return model.eval()


def full_forward_greedy(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy continuation without a cache: the whole sequence through forward at every step."""
    tokens = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("batch", [1, 3])  # one token per step takes the top-k experts directly, more all experts
def test_greedy_equals_full_forward_argmax(variant, batch):
    model = tiny_lm(**VARIANTS[variant])
    prompt = torch.randint(0, 256, (batch, 5), generator=torch.Generator().manual_seed(batch))
    assert torch.equal(model.generate(prompt, 8, temperature=0), full_forward_greedy(model, prompt, 8))


def test_greedy_without_grouped_mm_takes_the_layer_dispatch(monkeypatch):
    model = tiny_lm()
    prompt = torch.randint(0, 256, (3, 5), generator=torch.Generator().manual_seed(6))
    expected = full_forward_greedy(model, prompt, 6)
    monkeypatch.delattr(torch.nn.functional, "grouped_mm")  # torch < 2.10
    assert torch.equal(model.generate(prompt, 6, temperature=0), expected)


@pytest.mark.parametrize("variant", ["mixtral", "qkv-bias-clip-shared-dense"])
def test_a_model_too_large_to_copy_decodes_through_views_of_its_weights(monkeypatch, variant):
    monkeypatch.setattr(generation, "LAYOUT_COPY_LIMIT", 0)
    model = tiny_lm(**VARIANTS[variant])
    for batch in (1, 3):
        prompt = torch.randint(0, 256, (batch, 5), generator=torch.Generator().manual_seed(7))
        assert torch.equal(model.generate(prompt, 6, temperature=0), full_forward_greedy(model, prompt, 6))


def test_bundled_model_greedy_equals_full_forward_argmax():
    model = zoo.load("moe_lm.stdlib")
    tokenizer = ByteTokenizer()
    prompt = torch.tensor([[tokenizer.eos_token_id, *tokenizer.encode("import os\ndef ")]] * 2)
    prompt[1, -1] = ord("(")
    out = model.generate(prompt, 6, temperature=0)
    assert torch.equal(out, full_forward_greedy(model, prompt, 6))
    assert torch.equal(out[:1], model.generate(prompt[:1], 6, temperature=0))  # batch of one: the other MoE path


def alone_and_padded(model: torch.nn.Module, prompts: list[list[int]], new_tokens: int) -> None:
    """A left-padded batch continues every prompt exactly as the prompt alone."""
    length = max(map(len, prompts))
    ids = torch.tensor([[0] * (length - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(ids, new_tokens, temperature=0, attention_mask=mask)
    assert torch.equal(out[:, :length], ids)
    for row, prompt in zip(out, prompts):
        alone = model.generate(torch.tensor([prompt]), new_tokens, temperature=0)
        assert torch.equal(row[length:], alone[0, len(prompt) :]), prompts


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 255), min_size=1, max_size=6), min_size=1, max_size=3))
def test_left_padded_batch_equals_each_prompt_alone(prompts):
    alone_and_padded(tiny_lm(), prompts, 4)


def test_left_padding_with_a_sliding_window():
    alone_and_padded(tiny_lm(sliding_window=3), [[5, 6, 7, 8, 9, 10], [11], [12, 13, 14]], 6)


def test_greedy_equals_transformers_with_left_padding(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_lm(vocab_size=97, rope_theta=5e5)
    zoo.export_hf(model, tmp_path)
    reference = transformers.MixtralForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 97, (3, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :2] = mask[2, :5] = 0
    expected = reference.generate(
        ids, attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    assert torch.equal(model.generate(ids, 10, temperature=0, attention_mask=mask), expected)


def test_streaming_sees_every_token_in_order():
    model = tiny_lm()
    prompt = torch.randint(0, 256, (2, 3), generator=torch.Generator().manual_seed(3))
    steps: list[torch.Tensor] = []
    out = model.generate(
        prompt, 7, temperature=0.9, top_k=20, generator=torch.Generator().manual_seed(0), on_token=steps.append
    )
    assert len(steps) == 7 and all(s.shape == (2, 1) for s in steps)
    assert torch.equal(torch.cat(steps, dim=1), out[:, 3:])
    steps[0][0, 0] = out[0, 0] = 1  # normal tensors (decoding runs in inference mode): the caller may modify them
    pieces: list[str] = []
    text = complete(zoo.load("moe_lm.stdlib"), "def ", 12, stream=pieces.append, temperature=0)
    assert "".join(pieces) == text[len("def ") :] and text.startswith("def ")


def test_eos_stops_early_and_pads_finished_rows():
    model = tiny_lm()
    prompt = torch.randint(0, 256, (3, 4), generator=torch.Generator().manual_seed(4))
    greedy = model.generate(prompt, 8, temperature=0)
    eos = int(greedy[0, 5])  # row 0 emits it second; the others may or may not
    out = model.generate(prompt, 8, temperature=0, eos_token_id=eos)
    for row, full in zip(out, greedy):
        first = (full[4:] == eos).nonzero()
        end = 4 + int(first[0]) if len(first) else len(full) - 1
        assert torch.equal(row[: end + 1], full[: end + 1]) and row[end + 1 :].eq(eos).all()
    if not (greedy[:, 4:] == eos).any(dim=1).all():  # a row never emits it: all 8 steps run
        assert out.shape[1] == 12


def test_compiled_decode_step_gives_the_same_tokens():
    model = tiny_lm(num_layers=1, num_experts=2, top_k=1)
    prompt = torch.randint(0, 256, (2, 3), generator=torch.Generator().manual_seed(5))
    assert torch.equal(
        model.generate(prompt, 4, temperature=0, compile=True), model.generate(prompt, 4, temperature=0, compile=False)
    )


def test_bad_arguments_name_the_fix():
    model = tiny_lm()
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"pad on the left.*padding_side='left'"):
        model.generate(ids, 2, attention_mask=torch.tensor([[1, 1, 0]]))
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(1, 3\)"):
        model.generate(ids, 2, attention_mask=torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match="compile must be True, False or 'auto'"):
        model.generate(ids, 2, compile="yes")
    with pytest.raises(ValueError, match=r"^temperature must be a finite number >= 0 \(0: greedy\), got nan$"):
        model.generate(ids, 2, temperature=float("nan"))
    with pytest.raises(ValueError, match=r"^top_k must be 1 or more, got 0; top_p must be in \(0, 1\], got 1.5$"):
        model.generate(ids, 2, top_k=0, top_p=1.5)
    with pytest.raises(ValueError, match="whole numbers, got 2.5"):
        model.generate(ids, 2.5)
    with pytest.raises(ValueError, match=r"does not fit in memory: ask for fewer new tokens"):
        model.generate(ids, 10**15)
    with pytest.raises(ValueError, match="one per row of input_ids; got 2 items for 1 rows"):
        model.generate(ids, 2, generator=[torch.Generator(), torch.Generator()])


def test_complete_batch_rows_continue_as_alone_with_their_own_seeds_limits_and_stops():
    """One batch of prompts of different lengths, sampled: each row's text is its solo text
    (its own generator), ends at its own limit, and a row whose stream stops it ends alone."""
    model = zoo.load("moe_lm.stdlib")
    prompts = ["import os\n\ndef main(", "class A:", "    return self.", "x"]
    limits = [12, 3, 20, 0]
    alone = [complete(model, p, n, seed=i, temperature=0.9)[len(p) :] for i, (p, n) in enumerate(zip(prompts, limits))]
    rows = [Continuation(p, n, seed=i) for i, (p, n) in enumerate(zip(prompts, limits))]
    together = complete_batch(model, rows, temperature=0.9)
    assert [out.text for out in together] == alone
    assert [out.finish for out in together] == ["length"] * 4 and [len(out.ids) for out in together] == limits
    heard: list[str] = []
    rows[0].stream = lambda piece: heard.append(piece) or len(heard) == 2  # the second piece ends row 0
    stopped = complete_batch(model, rows, temperature=0.9)
    assert stopped[0].finish == "stopped" and stopped[0].text == "".join(heard) == alone[0][: len(stopped[0].text)]
    assert [out.text for out in stopped[1:]] == alone[1:]
    assert complete_batch(model, []) == []


class _FakeGraph:
    """torch.cuda.CUDAGraph on the CPU: replays what its capture recorded."""

    def __init__(self) -> None:
        self.replays = 0
        self.body = None

    def replay(self) -> None:
        self.replays += 1
        self.body()


def _fake_capture(fail: bool, state: dict):
    """torch.cuda.graph on the CPU: while inside, a step records its work instead of running it
    (as capture does); ``fail``: it raises, as a capture that meets a forbidden call does."""

    class Capture:
        def __init__(self, graph: _FakeGraph, capture_error_mode: str = "global") -> None:
            assert capture_error_mode == "thread_local"
            self.graph = graph

        def __enter__(self) -> None:
            if fail:
                raise RuntimeError("operation not permitted when stream is capturing")
            state["capturing"] = self.graph

        def __exit__(self, *exc) -> None:
            state["capturing"] = None

    return Capture


@pytest.mark.parametrize("fail", [False, True])
def test_graphed_step_warms_up_captures_once_then_replays(monkeypatch, fail):
    """GraphedStep's order (tests/test_cuda.py checks the tokens on a GPU): two calls run as they
    are, the third is captured with its tokens in a static buffer and replayed, later calls copy
    their tokens in and replay; a capture that fails leaves the step running as it is."""
    from zoo.architectures import step_graph

    state: dict = {"capturing": None, "runs": 0}
    cache = torch.zeros(4)

    def run(tokens: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        state["runs"] += 1
        cache[slot] = tokens.float().sum()  # a write into a tensor updated in place, as the KV cache
        return tokens * 10

    def step(tokens: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        if state["capturing"] is None:
            return run(tokens, slot)
        out = torch.empty_like(tokens)  # the graph's static output, written by each replay
        state["capturing"].body = lambda: out.copy_(run(tokens, slot))
        return out

    monkeypatch.setattr(step_graph.torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(step_graph.torch.cuda, "graph", _fake_capture(fail, state))
    graphed = step_graph.GraphedStep(step)
    slot = torch.tensor([0])
    outputs = []
    for i in range(5):
        slot.fill_(i % 4)
        if fail and i == 2:
            with pytest.warns(UserWarning, match="could not be captured"):
                outputs.append(graphed(torch.tensor([i, i + 1]), slot).clone())
            continue
        outputs.append(graphed(torch.tensor([i, i + 1]), slot).clone())
    assert [o.tolist() for o in outputs] == [[10 * i, 10 * i + 10] for i in range(5)]
    assert cache.tolist() == [9.0, 3.0, 5.0, 7.0] and state["runs"] == 5  # each step ran once, the fifth in slot 0
    assert (graphed.graph is None) == fail
    if not fail:
        assert graphed.graph.replays == 3
        with pytest.raises(ValueError, match="captured with"):  # another tensor: the graph would not read it
            graphed(torch.tensor([0, 1]), slot.clone())
