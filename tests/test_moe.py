"""MoE transformer: expert dispatch against a plain loop, routing losses, heads, generation,
checkpointing, the image model, the byte tokenizer and input errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.architectures.moe.moe_experts import MoEExperts, load_balancing_loss, router_z_loss
from zoo.architectures.moe.moe_transformer import (  # importing it registers moe_lm, moe_encoder, moe_vit
    MoEConfig,
    MoEOutput,
)
from zoo.tokenizer import ByteTokenizer

TINY = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=24, num_experts=4, top_k=2)


def tiny_lm(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = zoo.load("moe_lm", pretrained=False, **{**TINY, **kwargs})
    with torch.no_grad():  # larger weights than the 0.02 init, so that outputs differ visibly
        for param in model.parameters():
            if param.ndim > 1:
                param.normal_(std=0.15)
    return model


# --------------------------------------------------------------------------- dispatch


def reference_experts(x, index, weight, gate_up, down, capacity=None):
    """The plain loop: each expert on the tokens that chose it (GShard priority for capacity)."""
    num_tokens, top_k = index.shape
    out = torch.zeros_like(x)
    inter = down.shape[-1]
    for e in range(gate_up.shape[0]):
        token, choice = torch.where(index == e)
        keep = sorted(range(len(token)), key=lambda i: (choice[i].item(), token[i].item()))
        if capacity is not None:
            keep = keep[:capacity]
        if not keep:
            continue
        token, choice = token[keep], choice[keep]
        gu = x[token] @ gate_up[e].t()
        y = (F.silu(gu[:, :inter]) * gu[:, inter:]) @ down[e].t()
        out = out.index_add(0, token, y * weight[token, choice, None])
    return out


def random_routing(num_tokens, num_experts, top_k, allowed=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor(allowed if allowed is not None else range(num_experts))
    index = allowed[torch.rand(num_tokens, len(allowed), generator=g).argsort(dim=1)[:, :top_k]]
    weight = torch.rand(num_tokens, top_k, generator=g) + 0.1
    return index, weight


def run_experts(module_or_fn, x, index, weight, gate_up, down, capacity=None):
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight, gate_up, down)]
    if isinstance(module_or_fn, MoEExperts):
        with torch.no_grad():
            module_or_fn.gate_up_proj.copy_(leaves[2])
            module_or_fn.down_proj.copy_(leaves[3])
        module_or_fn.zero_grad(set_to_none=True)
        out = module_or_fn(leaves[0], index, leaves[1], capacity)
        params = [module_or_fn.gate_up_proj, module_or_fn.down_proj]
    else:
        out = module_or_fn(leaves[0], index, leaves[1], leaves[2], leaves[3], capacity)
        params = leaves[2:]
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype))
    return out.detach(), [leaves[0].grad, leaves[1].grad, *(p.grad for p in params)]


@pytest.mark.parametrize("dispatch", ["split", "grouped_mm", "dense"])
@pytest.mark.parametrize(
    "num_experts, top_k, allowed",
    [(6, 2, None), (6, 2, [0, 2, 3]), (4, 4, None), (5, 1, [4])],
    ids=["random", "empty-experts", "topk-equals-experts", "one-expert-only"],
)
def test_dispatch_matches_reference_loop(dispatch, num_experts, top_k, allowed):
    if dispatch == "grouped_mm" and not hasattr(F, "grouped_mm"):
        pytest.skip("torch.nn.functional.grouped_mm needs torch >= 2.10")
    torch.manual_seed(0)
    hidden, inter, tokens = 16, 12, 37
    x = torch.randn(tokens, hidden)
    gate_up, down = torch.randn(num_experts, 2 * inter, hidden) / 4, torch.randn(num_experts, hidden, inter) / 4
    index, weight = random_routing(tokens, num_experts, top_k, allowed)
    experts = MoEExperts(num_experts, hidden, inter, dispatch=dispatch)
    out, grads = run_experts(experts, x, index, weight, gate_up, down)
    ref_out, ref_grads = run_experts(reference_experts, x, index, weight, gate_up, down)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    for name, grad, ref in zip(("x", "routing weights", "gate_up_proj", "down_proj"), grads, ref_grads):
        torch.testing.assert_close(grad, ref, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    if allowed is not None:  # experts without tokens get exact zero gradients, not stale memory
        unused = sorted(set(range(num_experts)) - set(allowed))
        assert grads[2][unused].eq(0).all() and grads[3][unused].eq(0).all()


@pytest.mark.parametrize("dispatch", ["split", "dense"])
@pytest.mark.parametrize("capacity", [1, 5, 40])
def test_capacity_drops_the_lowest_priority_slots(capacity, dispatch):
    torch.manual_seed(0)
    hidden, inter, tokens, num_experts = 8, 6, 20, 3
    x = torch.randn(tokens, hidden)
    gate_up, down = torch.randn(num_experts, 2 * inter, hidden), torch.randn(num_experts, hidden, inter)
    index, weight = random_routing(tokens, num_experts, 2)
    out, grads = run_experts(
        MoEExperts(num_experts, hidden, inter, dispatch), x, index, weight, gate_up, down, capacity
    )
    ref_out, ref_grads = run_experts(reference_experts, x, index, weight, gate_up, down, capacity)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    for grad, ref in zip(grads, ref_grads):
        torch.testing.assert_close(grad, ref, atol=1e-5, rtol=1e-5)


def test_bf16_dispatch_is_close_to_fp32_and_keeps_dtypes():
    torch.manual_seed(0)
    x = torch.randn(50, 32)
    gate_up, down = torch.randn(4, 48, 32) / 6, torch.randn(4, 32, 24) / 5
    index, weight = random_routing(50, 4, 2)
    ref_out, _ = run_experts(reference_experts, x, index, weight, gate_up, down)
    experts = MoEExperts(4, 32, 24, "split").to(torch.bfloat16)
    out, grads = run_experts(experts, x.bfloat16(), index, weight, gate_up.bfloat16(), down.bfloat16())
    assert out.dtype == torch.bfloat16 and grads[0].dtype == torch.bfloat16 and grads[2].dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref_out, atol=0.05, rtol=0.05)


def test_grouped_mm_dispatch_needs_a_torch_that_has_it(monkeypatch):
    """Without torch.nn.functional.grouped_mm, "auto" takes the split even for bf16 on CUDA
    SM >= 80, and an explicit "grouped_mm" names the torch it needs."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda_bf16 = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, device="cuda")
    if hasattr(F, "grouped_mm"):
        assert MoEExperts(4, 16, 12, "auto")._use_grouped_mm(cuda_bf16)
    monkeypatch.delattr(F, "grouped_mm", raising=False)
    assert not MoEExperts(4, 16, 12, "auto")._use_grouped_mm(cuda_bf16)
    with pytest.raises(ValueError, match=r"torch\.nn\.functional\.grouped_mm, added in torch 2\.10"):
        MoEExperts(4, 16, 12, "grouped_mm")


# --------------------------------------------------------------------------- routing losses


def test_load_balancing_loss_equals_transformers():
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    torch.manual_seed(0)
    logits = tuple(torch.randn(2 * 9, 6) * 2 for _ in range(3))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 6:] = 0
    for attention_mask in (None, mask):
        expected = load_balancing_loss_func(logits, 6, 2, attention_mask)
        torch.testing.assert_close(load_balancing_loss(logits, 6, 2, attention_mask), expected)
    uniform = [torch.zeros(12, 4)]  # equal probabilities: top-k ties, still E * sum f P = k
    assert load_balancing_loss(uniform, 4, 2).item() == pytest.approx(2.0)


def test_router_z_loss_is_the_mean_squared_logsumexp():
    logits = [torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]]), torch.tensor([[1.0, 1.0], [2.0, -1.0]])]
    rows = [math.log(2.0), math.log(4.0), 1 + math.log(2.0), math.log(math.exp(2) + math.exp(-1))]
    assert router_z_loss(logits).item() == pytest.approx(sum(r * r for r in rows) / 4, rel=1e-6)
    masked = router_z_loss(logits, torch.tensor([1, 0]))
    assert masked.item() == pytest.approx((rows[0] ** 2 + rows[2] ** 2) / 2, rel=1e-6)


def test_output_carries_weighted_aux_loss_and_expert_fractions():
    model = tiny_lm(router_aux_loss_coef=0.1, router_z_loss_coef=0.01).train()
    ids = torch.randint(0, 259, (2, 10))
    assert isinstance(model(ids), torch.Tensor)  # the contract: model(x) returns the logits
    out = model(ids, return_aux=True)
    assert isinstance(out, MoEOutput) and out.logits.shape == (2, 10, 259)
    torch.testing.assert_close(out.aux_loss, 0.1 * out.load_balancing_loss + 0.01 * out.router_z_loss)
    assert out.expert_fractions.shape == (2, 4) and not out.expert_fractions.requires_grad
    torch.testing.assert_close(out.expert_fractions.sum(1), torch.ones(2))
    (out.logits.logsumexp(-1).mean() + out.aux_loss).backward()
    assert model.layers[0].mlp.gate.weight.grad.abs().sum() > 0  # the losses reach the router


# --------------------------------------------------------------------------- models and heads


def test_causal_lm_ignores_right_padding_and_future_tokens():
    model = tiny_lm().eval()
    ids = torch.randint(0, 256, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        short = model(ids[1:, :7])
        changed = ids.clone()
        changed[:, 8:] = 5
        prefix = model(changed)[:, :8]
    torch.testing.assert_close(full[1, :7], short[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(prefix, model(ids)[:, :8].detach(), atol=1e-5, rtol=1e-5)


def test_encoder_sequence_head_pools_real_tokens_only():
    torch.manual_seed(0)
    model = zoo.load("moe_encoder", pretrained=False, num_classes=3, **TINY).eval()
    ids = torch.randint(0, 256, (1, 6))
    padded = torch.cat([ids, torch.full((1, 4), 256)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    with torch.no_grad():
        logits = model(ids)
        torch.testing.assert_close(model(padded, attention_mask=mask), logits, atol=1e-5, rtol=1e-5)
        assert logits.shape == (1, 3)
        changed = ids.clone()
        changed[0, -1] = (ids[0, -1] + 1) % 256
        features = model.forward_features(ids)
        assert not torch.allclose(model.forward_features(changed)[:, 0], features[:, 0])  # bidirectional


def test_heads_and_classifier_reset():
    ids = torch.randint(0, 256, (2, 5))
    seq = zoo.load("moe_lm", pretrained=False, head="sequence_classification", num_classes=4, **TINY).eval()
    tok = zoo.load("moe_lm", pretrained=False, head="token_classification", num_classes=7, **TINY)
    assert seq(ids).shape == (2, 4) and tok(ids).shape == (2, 5, 7)
    with torch.no_grad():  # a causal model's sequence features are its last real token's
        features = seq.forward_features(ids)
        torch.testing.assert_close(seq.forward_head(features, pre_logits=True), features[:, -1])
    seq.reset_classifier(0)
    assert seq(ids).shape == (2, TINY["hidden_size"]) and seq.num_classes == 0
    lm = zoo.load("moe_lm", pretrained=False, **TINY)
    assert lm.num_classes == 259 and lm.get_classifier() is lm.lm_head
    with pytest.raises(ValueError, match="sequence_classification"):
        zoo.load("moe_lm", pretrained=False, num_classes=10, **TINY)
    tied = zoo.load("moe_lm", pretrained=False, tie_word_embeddings=True, **TINY)
    assert tied.lm_head.weight is tied.embed_tokens.weight


def test_save_and_load_roundtrip(tmp_path):
    for kwargs in ({}, {"tie_word_embeddings": True}):
        model = tiny_lm(**kwargs).eval()
        zoo.save(model, tmp_path / str(len(kwargs)))
        again = zoo.load(tmp_path / str(len(kwargs)))
        ids = torch.randint(0, 259, (2, 7))
        torch.testing.assert_close(again(ids), model(ids))
        if kwargs:
            assert again.lm_head.weight is again.embed_tokens.weight


def test_cached_generation_equals_full_recompute():
    for options in ({}, {"sliding_window": 5}):
        model = tiny_lm(**options).eval()
        prompt = torch.randint(0, 256, (2, 4))
        generated = model.generate(prompt, max_new_tokens=10, temperature=0)
        tokens = prompt
        with torch.no_grad():
            for _ in range(10):
                next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, next_token], dim=1)
        assert torch.equal(generated, tokens), options


def test_generate_sampling_and_eos():
    model = tiny_lm().eval()
    prompt = torch.randint(0, 256, (3, 3))
    g = torch.Generator().manual_seed(0)
    first = model.generate(prompt, 6, temperature=0.8, top_k=5, top_p=0.9, generator=g)
    again = model.generate(prompt, 6, temperature=0.8, top_k=5, top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert first.shape == (3, 9) and torch.equal(first, again) and torch.equal(first[:, :3], prompt)
    greedy = model.generate(prompt, 6, temperature=0)
    eos = int(greedy[0, 4])  # the token row 0 emits second: rows stop there or run to the end
    stopped = model.generate(prompt, 6, temperature=0, eos_token_id=eos)
    for row, full in zip(stopped, greedy):
        hits = (full[3:] == eos).nonzero()
        if len(hits):
            end = 3 + hits[0].item()
            assert torch.equal(row[: end + 1], full[: end + 1]) and row[end:].eq(eos).all()
    with pytest.raises(ValueError, match="lm head"):
        zoo.load("moe_encoder", pretrained=False, **TINY).generate(prompt, 2)


def test_grad_checkpointing_gives_the_same_gradients():
    model = tiny_lm(router_jitter=0.1, attention_dropout=0.1).train()
    ids = torch.randint(0, 256, (2, 9))

    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        model.set_grad_checkpointing(checkpointing)
        torch.manual_seed(3)
        out = model(ids, return_aux=True)
        (F.cross_entropy(out.logits.flatten(0, 1), ids.flatten()) + out.aux_loss).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain, checkpointed = grads(False), grads(True)
    for name in plain:
        torch.testing.assert_close(
            checkpointed[name], plain[name], atol=1e-6, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_dense_layers_and_shared_expert():
    model = tiny_lm(dense_layers=[0], shared_expert_size=16, qkv_bias=True, qk_norm=True)
    assert not model.layers[0].is_moe and model.layers[1].mlp.shared_expert is not None
    out = model(torch.randint(0, 256, (2, 5)), return_aux=True)
    assert out.expert_fractions.shape == (1, 4)
    dense = tiny_lm(dense_layers=[0, 1])(torch.randint(0, 256, (1, 3)), return_aux=True)
    assert dense.aux_loss.item() == 0 and dense.expert_fractions.shape == (0, 4)


def test_autocast_bf16_training_step():
    model = tiny_lm().train()
    ids = torch.randint(0, 256, (2, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, return_aux=True)
        loss = F.cross_entropy(out.logits.float().flatten(0, 1), ids.flatten()) + out.aux_loss
    loss.backward()
    grad = model.layers[0].mlp.experts.gate_up_proj.grad
    assert grad.dtype == torch.float32 and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_moe_vit_on_28px_grayscale_and_other_sizes():
    torch.manual_seed(0)
    model = zoo.load("moe_vit", pretrained=False, num_layers=2).eval()
    out = model(torch.randn(3, 1, 28, 28), return_aux=True)
    assert out.logits.shape == (3, 10) and out.expert_fractions.shape == (1, 8)  # MoE in every other layer
    assert model(torch.randn(1, 1, 32, 32)).shape == (1, 10)  # position grid resized
    maps = model.forward_intermediates(torch.randn(2, 1, 28, 28), intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(2, 128, 7, 7)] * 2
    rgb = zoo.load("moe_vit", pretrained=False, in_chans=3, img_size=32, patch_size=8, num_classes=5, num_layers=2)
    assert rgb(torch.randn(2, 3, 32, 32)).shape == (2, 5)
    backbone = zoo.load("moe_vit", pretrained=False, features_only=True, out_indices=[-1], num_layers=2)
    assert backbone(torch.randn(1, 1, 28, 28))[0].shape == (1, 128, 7, 7)


def test_moe_vit_convolutional_stem():
    torch.manual_seed(0)
    model = zoo.load("moe_vit", pretrained=False, num_layers=2, stem_channels=(8, 16)).eval()
    assert model.get_submodule(model.first_conv).weight.shape == (8, 1, 3, 3)
    assert model.patch_embed[0][1].weight.eq(1).all()  # BatchNorm starts as the identity, not zeroed
    assert model(torch.randn(3, 1, 28, 28)).shape == (3, 10)
    assert model.forward_intermediates(torch.randn(2, 1, 28, 28), intermediates_only=True)[0].shape == (2, 128, 7, 7)
    with pytest.raises(ValueError, match="set patch_size=8"):
        zoo.load("moe_vit", pretrained=False, stem_channels=(8, 16, 32))


def test_bad_inputs_raise_clear_errors():
    model = tiny_lm()
    with pytest.raises(ValueError, match="integer tensor.*ByteTokenizer"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"unsqueeze\(0\)"):
        model(torch.randint(0, 256, (5,)))
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 259\)"):
        model(torch.tensor([[1, 300]]))
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(2, 5\)"):
        model(torch.randint(0, 256, (2, 5)), attention_mask=torch.ones(2, 4))
    with pytest.raises(TypeError, match="unknown MoE option.*valid options"):
        zoo.load("moe_lm", pretrained=False, num_expert=4)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        MoEConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="top_k must be in 1..num_experts"):
        MoEConfig(num_experts=2, top_k=3)
    with pytest.raises(ValueError, match="causal"):
        zoo.load("moe_lm", pretrained=False, capacity_factor=1.25)
    with pytest.raises(ValueError, match="no head"):
        zoo.load("moe_lm", pretrained=False, head="classification")
    vit = zoo.load("moe_vit", pretrained=False, num_layers=1)
    with pytest.raises(ValueError, match=r"expects input of shape \(N, 1, H, W\).*in_chans=3"):
        vit(torch.randn(1, 3, 28, 28))
    with pytest.raises(ValueError, match="multiples of patch_size=4"):
        vit(torch.randn(1, 1, 30, 30))


def test_encoder_with_capacity_trains():
    model = zoo.load("moe_encoder", pretrained=False, capacity_factor=0.5, **TINY).train()
    out = model(torch.randint(0, 256, (4, 16)), return_aux=True)
    (out.logits.sum() + out.aux_loss).backward()
    assert torch.isfinite(model.layers[0].mlp.experts.down_proj.grad).all()


# --------------------------------------------------------------------------- tokenizer


def test_byte_tokenizer_roundtrip_and_batches():
    tok = ByteTokenizer()
    text = "déjà vu — 日本語 ✓"
    ids = tok.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id and max(ids[1:-1]) < 256
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode("ab") + [tok.eos_token_id] + tok.encode("cd")) == "ab"
    assert tok.decode([0xE6, 0x97]) == "\ufffd"  # a cut multi-byte character
    input_ids, mask = tok(["hi", "hello"], padding_side="left")
    assert input_ids.shape == (2, 5) and input_ids[0, :3].eq(tok.pad_token_id).all()
    assert mask.tolist() == [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]]
    right, right_mask = tok(["hi", "hello"], max_length=4)
    assert tok.decode_batch(right) == ["hi", "hell"] and right_mask[0].tolist() == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([259])
    model = tiny_lm().eval()
    assert model(*tok(["a byte", "batch"])).shape == (2, 6, tok.vocab_size)
