"""Hugging Face checkpoints for the MoE transformer: logits and aux-loss parity with
transformers' Mixtral (and Qwen2-MoE, OLMoE), per-expert, packed and sharded layouts, and the
export round trip zoo -> export_hf -> MixtralForCausalLM.from_pretrained."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

transformers = pytest.importorskip("transformers")

import zoo  # noqa: E402
from zoo.errors import WeightsMismatchError  # noqa: E402
from zoo.interop.hf_export import export_hf  # noqa: E402

MIXTRAL = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=64,
)


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights larger than transformers' 0.02 init, and non-trivial norm scales, so that
    routing and logits vary between tokens and a wrong key would show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(1 + 0.1 * torch.randn(param.shape, generator=g))
            else:
                param.copy_(0.15 * torch.randn(param.shape, generator=g))
    return model.eval()


def mixtral(tmp_path, **overrides):
    config = transformers.MixtralConfig(**{**MIXTRAL, **overrides})
    torch.manual_seed(0)
    model = randomize(transformers.MixtralForCausalLM(config))
    model.save_pretrained(tmp_path)
    return model


def inputs():
    torch.manual_seed(1)
    ids = torch.randint(0, MIXTRAL["vocab_size"], (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # right padding
    mask[2, :4] = 0  # left padding
    return ids, mask


def assert_parity(ours: torch.nn.Module, reference: torch.nn.Module, atol: float = 1e-5) -> None:
    ids, mask = inputs()
    with torch.no_grad():
        for attention_mask in (None, mask):
            expected = reference(ids, attention_mask=attention_mask, output_router_logits=True)
            got = ours(ids, attention_mask=attention_mask, return_aux=True)
            real = (attention_mask if attention_mask is not None else torch.ones_like(ids)).bool()
            assert expected.logits.abs().max() > 0.5  # the comparison is not between near-zero logits
            torch.testing.assert_close(got.logits[real], expected.logits[real], atol=atol, rtol=0)
            torch.testing.assert_close(got.load_balancing_loss, expected.aux_loss, atol=1e-6, rtol=1e-6)


def test_mixtral_logits_and_aux_loss_parity(tmp_path):
    reference = mixtral(tmp_path)
    keys = json.loads((tmp_path / "config.json").read_text())
    assert keys["model_type"] == "mixtral"
    model = zoo.load("moe_lm", weights=tmp_path)
    assert model.pretrained_cfg["weights"] == str(tmp_path) and not model.training
    assert_parity(model, reference)


def test_sharded_checkpoint_and_greedy_generation(tmp_path):
    reference = mixtral(tmp_path, tie_word_embeddings=True)
    transformers.MixtralForCausalLM.save_pretrained(reference, tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    model = zoo.load("moe_lm", weights=tmp_path)
    assert model.lm_head.weight is model.embed_tokens.weight
    assert_parity(model, reference)
    prompt = inputs()[0][:2, :5]
    expected = reference.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, max_new_tokens=8, temperature=0), expected)


def test_packed_expert_layout(tmp_path):
    reference = mixtral(tmp_path)
    state = reference.state_dict()  # transformers 5 holds experts packed: mlp.experts.gate_up_proj
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    (tmp_path / "model.safetensors").unlink()
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert_parity(zoo.load("moe_lm", weights=tmp_path), reference)


def test_export_roundtrip_loads_in_transformers(tmp_path):
    torch.manual_seed(0)
    options = {
        k: v
        for k, v in MIXTRAL.items()
        if k
        not in (
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "num_local_experts",
            "num_experts_per_tok",
        )
    }
    options |= dict(num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, top_k=2, rope_theta=5e5)
    for tied in (False, True):
        model = randomize(zoo.load("moe_lm", pretrained=False, tie_word_embeddings=tied, **options))
        directory = tmp_path / f"tied{tied}"
        export_hf(model, directory, max_shard_size=60_000 if tied else 2**30)
        assert (directory / "model.safetensors.index.json").is_file() == tied
        reference = transformers.MixtralForCausalLM.from_pretrained(directory).eval()
        assert_parity(model, reference)
        again = zoo.load("moe_lm", weights=directory)  # and back into zoo
        ids = inputs()[0]
        torch.testing.assert_close(again(ids), model(ids).detach())


def test_classification_head_on_a_pretrained_body(tmp_path):
    reference = mixtral(tmp_path)
    model = zoo.load("moe_lm", weights=tmp_path, head="sequence_classification", num_classes=3)
    ids, mask = inputs()
    with torch.no_grad():
        body = reference.model(ids, attention_mask=mask).last_hidden_state
        features = model.forward_features(ids, attention_mask=mask)
        real = mask.bool()
        torch.testing.assert_close(features[real], body[real], atol=1e-5, rtol=0)
        assert model(ids, attention_mask=mask).shape == (3, 3)
    assert torch.isfinite(model.classifier.weight).all() and model.num_classes == 3


def test_qwen2_moe_shared_expert_dense_layer_and_qkv_bias(tmp_path):
    config = transformers.Qwen2MoeConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=56,
        moe_intermediate_size=24,
        shared_expert_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        mlp_only_layers=[1],
        norm_topk_prob=False,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    reference = randomize(transformers.Qwen2MoeForCausalLM(config))
    reference.save_pretrained(tmp_path)
    model = zoo.load("moe_lm", weights=tmp_path)
    assert model.config.dense_layers == (1,) and model.config.qkv_bias and model.config.shared_expert_size == 32
    assert_parity(model, reference)


def test_olmoe_qk_norm(tmp_path):
    config = transformers.OlmoeConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        clip_qkv=2.0,
    )
    torch.manual_seed(0)
    reference = randomize(transformers.OlmoeForCausalLM(config))
    reference.save_pretrained(tmp_path)
    model = zoo.load("moe_lm", weights=tmp_path)
    assert model.config.qk_norm and model.config.clip_qkv == 2.0
    assert_parity(model, reference)


def test_checkpoint_errors(tmp_path):
    mixtral(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(WeightsMismatchError, match=r"missing \(\d+\): layers\.2\."):
        zoo.load("moe_lm", weights=tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(WeightsMismatchError, match="shape mismatches"):
        zoo.load("moe_lm", weights=tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(ValueError, match="unsupported model_type 'llama'"):
        zoo.load("moe_lm", weights=tmp_path)
    with pytest.raises(ValueError, match="not moe_vit"):
        zoo.load("moe_vit", weights=tmp_path)
    with pytest.raises(ValueError, match="causal language models"):
        export_hf(zoo.load("moe_encoder", pretrained=False), tmp_path / "out")
    with pytest.raises(ValueError, match="shared_expert_size"):
        export_hf(zoo.load("moe_lm", pretrained=False, shared_expert_size=8), tmp_path / "out")


@pytest.mark.parametrize("shard", ["../../../../etc/passwd", "/etc/passwd", "sub/model.safetensors", "x.bin"])
def test_an_index_naming_a_file_outside_its_folder_is_refused(tmp_path, shard):
    reference = mixtral(tmp_path)
    transformers.MixtralForCausalLM.save_pretrained(reference, tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = shard
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(zoo.ZooError, match=r"index\.json: field 'weight_map' names .*not a \.safetensors file in the"):
        zoo.load("moe_lm", weights=tmp_path)
