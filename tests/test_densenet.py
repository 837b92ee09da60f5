"""DenseNet family (entries: tests/test_entries.py, test_parity.py): the CIFAR DenseNet-BC,
the memory-efficient mode, the model and feature-extraction contracts, the key converter."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision
from torch import nn

import zoo
from zoo.architectures import densenet
from zoo.architectures.layers import SqueezeExcite
from zoo.store.convert import convert_state_dict


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_densenet121_train_gradients_match_torchvision():
    torch.manual_seed(0)
    reference = torchvision.models.densenet121()
    ours = densenet.densenet121()
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    out_ref, out = reference.train()(x), ours.train()(x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=0)
    out_ref.square().sum().backward()
    out.square().sum().backward()
    ref_params = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, ref_params[name].grad, atol=1e-5, rtol=1e-4, msg=name)
    ref_buffers = dict(reference.named_buffers())
    for name, b in ours.named_buffers():  # BN running statistics updated the same way
        torch.testing.assert_close(b, ref_buffers[name], atol=1e-6, rtol=0, msg=name)


def _saved_bytes(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The output and the bytes of distinct storages autograd keeps for the backward pass."""
    storages = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    return out, sum(storages.values())


def test_memory_efficient_mode_same_gradients_less_memory(monkeypatch):
    calls = []

    def counting_checkpoint(*args, **kwargs):
        calls.append(kwargs.get("use_reentrant"))
        return torch.utils.checkpoint.checkpoint(*args, **kwargs)

    monkeypatch.setattr(densenet, "checkpoint", counting_checkpoint)
    torch.manual_seed(0)
    plain = densenet.densenet_bc_40().train()
    efficient = copy.deepcopy(plain)
    efficient.set_grad_checkpointing()
    x = torch.randn(8, 3, 32, 32)
    out_plain, plain_bytes = _saved_bytes(plain, x)
    out_efficient, efficient_bytes = _saved_bytes(efficient, x)
    assert calls == [False] * 18  # every dense layer's bottleneck, non-reentrant
    assert efficient_bytes < 0.7 * plain_bytes  # 0.59 measured: no concatenations kept
    torch.testing.assert_close(out_efficient, out_plain, atol=1e-6, rtol=0)
    out_plain.square().sum().backward()
    out_efficient.square().sum().backward()
    grads = dict(plain.named_parameters())
    for name, p in efficient.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=1e-6, rtol=1e-5, msg=name)
    efficient.eval()(x)
    with torch.no_grad():
        efficient.train()(x)
    assert len(calls) == 18  # not used in eval, nor without gradients


def test_densenet_bc_sizes_and_small_images():
    # The authors' CIFAR DenseNet-BC (L=100, k=12, 10 classes): the paper's "0.8M" rounds 769,162.
    assert _num_params(densenet.densenet_bc_100()) == 769_162
    model = densenet.densenet_bc_100(in_chans=1)
    assert model.features.denseblock3.num_layers == 16 and model.min_input_size == 4
    assert not any(k.startswith("features.norm0") for k in model.state_dict())  # bare 3x3 stem
    assert model.features.transition1.conv.out_channels == 216 // 2  # compression 0.5
    x = torch.randn(2, 1, 28, 28)
    assert model.forward_features(x).shape == (2, 342, 7, 7)
    assert model(x).shape == (2, 10)
    assert 170_000 <= _num_params(densenet.densenet_bc_40()) <= 200_000


def test_sedensenet_gates_each_block():
    plain = densenet.densenet_bc_100().eval()
    se = densenet.sedensenet_bc_100().eval()
    assert all(isinstance(getattr(se.features, f"denseblock{i}").se, SqueezeExcite) for i in (1, 2, 3))
    assert _num_params(se) > _num_params(plain)
    missing, unexpected = se.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all(".se." in k for k in missing)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (se(x) - plain(x)).abs().max() > 1e-3


@pytest.mark.parametrize(("name", "size", "num_features"), [("densenet121", 64, 1024), ("densenet_bc_40", 32, 132)])
def test_model_contract(name: str, size: int, num_features: int) -> None:
    model = getattr(densenet, name)().eval()
    assert model.num_features == num_features and model.in_chans == 3 and model.pretrained_cfg == {}
    first = model.get_submodule(model.first_conv)
    assert isinstance(first, nn.Conv2d) and first.in_channels == 3
    assert first is next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        features = model.forward_features(x)
        stride = model.feature_info[-1]["reduction"]
        assert features.shape == (2, num_features, size // stride, size // stride)
        assert features.min() >= 0  # after the final BN-ReLU
        pooled = model.forward_head(features, pre_logits=True)
        assert pooled.shape == (2, num_features)
        torch.testing.assert_close(model(x), model.classifier(pooled))
        assert model.get_classifier() is model.classifier

        model.reset_classifier(7)
        assert (model.classifier.in_features, model.classifier.out_features, model.num_classes) == (num_features, 7, 7)
        assert model(x).shape == (2, 7)
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pooled)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="num_classes"):
            model.reset_classifier(bad)
    with pytest.raises(ValueError, match="num_classes"):
        getattr(densenet, name)(num_classes=-3)
    with pytest.raises(ValueError, match=r"in_chans=1"):
        model(torch.randn(2, 1, size, size))
    smallest = model.min_input_size  # the smallest side that runs, not the stride
    with pytest.raises(ValueError, match=f"at least {smallest}x{smallest}"):
        model(torch.randn(2, 3, smallest - 1, size))
    assert model(torch.randn(2, 3, smallest, size)).shape[0] == 2


@pytest.mark.parametrize(
    ("name", "reductions"), [("densenet121", [2, 4, 8, 16, 32]), ("sedensenet_bc_100", [1, 1, 2, 4])]
)
def test_feature_levels(name: str, reductions: list[int]) -> None:
    model = getattr(densenet, name)().eval()
    assert [info["reduction"] for info in model.feature_info] == reductions
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        final, levels = model.forward_intermediates(x)
        assert len(levels) == len(reductions)
        for info, feature in zip(model.feature_info, levels):
            r = info["reduction"]
            assert feature.shape == (1, info["num_chs"], 64 // r, 64 // r), info
            assert isinstance(model.get_submodule(info["module"]), nn.Module)
        torch.testing.assert_close(levels[-1], model.forward_features(x))
        torch.testing.assert_close(final, model.forward_features(x))

        reached = []
        model.features.norm5.register_forward_hook(lambda *_: reached.append("norm5"))
        final, subset = model.forward_intermediates(x, [-2, 1], stop_early=True)
        assert not reached  # stops after the deepest level asked for
        assert len(subset) == 2
        torch.testing.assert_close(final, levels[-2])
        torch.testing.assert_close(subset[0], levels[1])
        torch.testing.assert_close(subset[1], levels[-2])
    with pytest.raises(ValueError, match="level"):
        model.forward_intermediates(x, [len(reductions)])


def test_init_and_dropout_as_torchvision():
    model = densenet.densenet121(drop_rate=0.5)
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d) and m.weight.numel() >= 16_384:  # enough samples for the std
            fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
            assert m.weight.std().item() == pytest.approx((2 / fan_in) ** 0.5, rel=0.1), name
        elif isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any(), name
    assert not model.classifier.bias.any()
    small = densenet.densenet_bc_40(drop_rate=0.5).train()  # dropout on each layer's new features
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert not torch.equal(small(x), small(x))
        assert torch.equal(small.eval()(x), small(x))


def test_converter_renames_legacy_keys_only():
    legacy = {
        "features.denseblock2.denselayer11.norm.1.running_var": torch.ones(3),
        "features.denseblock2.denselayer11.conv.2.weight": torch.ones(1),
        "features.transition1.norm.weight": torch.ones(3),
        "features.transition1.norm.running_mean": torch.zeros(3),
        "features.transition1.norm.num_batches_tracked": torch.tensor(5),
        "features.denseblock1.denselayer1.norm1.running_mean": torch.zeros(3),
        "classifier.weight": torch.ones(1),
    }
    converted = convert_state_dict("torchvision_densenet", legacy)
    assert sorted(converted) == sorted(
        [
            "features.denseblock2.denselayer11.norm1.running_var",
            "features.denseblock2.denselayer11.conv2.weight",
            "features.transition1.norm.weight",
            "features.transition1.norm.running_mean",
            "features.transition1.norm.num_batches_tracked",
            "features.denseblock1.denselayer1.norm1.running_mean",
            "classifier.weight",
        ]
    )
    assert converted["features.transition1.norm.num_batches_tracked"] == 5
    assert convert_state_dict("torchvision_densenet", converted).keys() == converted.keys()  # idempotent


def test_all_builders_registered():
    names = ["densenet121", "densenet161", "densenet169", "densenet201", "densenet_bc_100", "densenet_bc_40"]
    assert {*names, "sedensenet_bc_100"} <= set(zoo.list_models())
