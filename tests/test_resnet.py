"""ResNet family: parity with torchvision and timm, the small-image ResNets, the model contract."""

from __future__ import annotations

import copy
import re

import pytest
import timm
import timm.layers
import torch
import torchvision
import torchvision.ops
from torch import nn
from torchvision.models._utils import _make_divisible

import zoo
from zoo.architectures import resnet
from zoo.architectures.layers import SqueezeExcite, make_divisible

TORCHVISION_NAMES = [
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "wide_resnet50_2",
]
ALL_NAMES = [*TORCHVISION_NAMES, "seresnet50", "resnet20", "resnet56", "seresnet20"]


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def _randomise_bn(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial statistics and affine parameters, so that a block
    wired differently (BN order, stride placement, SE position) changes the output."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.bias.copy_(torch.randn(n, generator=g) * 0.1)


def _max_eval_diff(reference: nn.Module, ours: nn.Module) -> float:
    """Load the reference's state dict strictly into ours (built on the meta device, as
    zoo.load does, which also skips a second random init); max abs output difference in eval."""
    _randomise_bn(reference)
    ours.load_state_dict(reference.state_dict(), strict=True, assign=True)
    reference.eval()
    ours.eval()
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, actual = reference(x), ours(x)
    assert actual.shape == expected.shape == (2, 1000)
    assert expected.std() > 1e-2  # the comparison is not between two near-constant outputs
    return (actual - expected).abs().max().item()


@pytest.mark.parametrize("name", TORCHVISION_NAMES)
def test_matches_torchvision(name: str) -> None:
    reference = getattr(torchvision.models, name)()
    with torch.device("meta"):
        ours = getattr(resnet, name)()
    assert _num_params(ours) == _num_params(reference)
    assert _max_eval_diff(reference, ours) <= 1e-5


def test_seresnet50_matches_timm() -> None:
    reference = timm.create_model("seresnet50", pretrained=False)
    with torch.device("meta"):
        ours = resnet.seresnet50()
    assert _num_params(ours) == _num_params(reference) == 28_088_024
    assert _max_eval_diff(reference, ours) <= 1e-5


def test_resnet18_train_gradients_match_torchvision() -> None:
    reference = torchvision.models.resnet18()
    ours = resnet.resnet18()
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    out_ref, out = reference.train()(x), ours.train()(x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=0)
    out_ref.sum().backward()
    out.sum().backward()
    ref_params = dict(reference.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, ref_params[name].grad, atol=1e-5, rtol=0, msg=name)
    ref_buffers = dict(reference.named_buffers())
    for name, b in ours.named_buffers():  # BN running statistics updated the same way
        torch.testing.assert_close(b, ref_buffers[name], atol=1e-6, rtol=0, msg=name)


def test_all_builders_registered() -> None:
    assert set(ALL_NAMES) <= set(zoo.list_models())


def test_resnet20_small_images() -> None:
    model = resnet.resnet20(in_chans=1, num_classes=10)
    assert 260_000 <= _num_params(model) <= 280_000
    assert not any("downsample" in k for k in model.state_dict())  # option-A shortcuts are free
    assert model.feature_info[-1]["reduction"] == 4 and model.min_input_size == 1
    x = torch.randn(2, 1, 28, 28)
    assert model.forward_features(x).shape == (2, 64, 7, 7)
    assert model(x).shape == (2, 10)


def test_resnet56_and_seresnet20() -> None:
    assert 840_000 <= _num_params(resnet.resnet56()) <= 860_000
    model = resnet.seresnet20()
    assert model.state_dict()["layer3.2.se.fc1.weight"].shape == (8, 64, 1, 1)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_pad_shortcut_subsamples_and_zero_pads() -> None:
    x = torch.randn(2, 16, 8, 8)
    y = resnet.PadShortcut(16, 32, stride=2)(x)
    assert y.shape == (2, 32, 4, 4)
    assert torch.equal(y[:, 8:24], x[:, :, ::2, ::2])
    assert not y[:, :8].any() and not y[:, 24:].any()


@pytest.mark.parametrize(
    ("name", "size", "num_features"), [("resnet18", 64, 512), ("resnet20", 32, 64), ("seresnet50", 64, 2048)]
)
def test_model_contract(name: str, size: int, num_features: int) -> None:
    model = getattr(resnet, name)().eval()
    assert model.num_features == num_features and model.in_chans == 3 and model.pretrained_cfg == {}
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        features = model.forward_features(x)
        stride = model.feature_info[-1]["reduction"]
        assert features.shape == (2, num_features, size // stride, size // stride)
        pooled = model.forward_head(features, pre_logits=True)
        assert pooled.shape == (2, num_features)
        torch.testing.assert_close(model(x), model.fc(pooled))
        assert model.get_classifier() is model.fc

        model.reset_classifier(7)
        assert isinstance(model.get_classifier(), nn.Linear)
        assert (model.fc.in_features, model.fc.out_features, model.num_classes) == (num_features, 7, 7)
        assert model(x).shape == (2, 7)

        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pooled)
    with pytest.raises(ValueError, match="num_classes"):
        model.reset_classifier(-1)
    with pytest.raises(ValueError, match="num_classes"):
        getattr(resnet, name)(num_classes=-3)


def test_weight_init_as_torchvision() -> None:
    model = resnet.resnet50()
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d) and m.weight.numel() >= 16_384:  # enough samples for the std
            fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
            assert m.weight.std().item() == pytest.approx((2 / fan_out) ** 0.5, rel=0.1), name
        elif isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any(), name
    assert model.fc.weight.abs().max() <= model.num_features**-0.5  # PyTorch's default Linear init


def test_min_input_size() -> None:
    """Any side runs (padded strides, then global pooling), as with torchvision's ResNets;
    the total stride is the deepest feature level's reduction, not a minimum."""
    assert resnet.resnet50().min_input_size == 1 and resnet.resnet50().feature_info[-1]["reduction"] == 32
    assert resnet.resnet56().min_input_size == 1 and resnet.resnet56().feature_info[-1]["reduction"] == 4


def test_zero_init_residual_and_dropout() -> None:
    model = resnet.resnet18(zero_init_residual=True, drop_rate=0.5)
    assert all(not block.bn2.weight.any() for stage in (model.layer1, model.layer4) for block in stage)
    assert resnet.resnet50(zero_init_residual=True).layer2[0].bn3.weight.abs().sum() == 0
    assert resnet.resnet50().layer2[0].bn3.weight.abs().sum() > 0
    model.eval()
    model.drop.train()  # only the dropout in training mode: two passes must differ
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))


def test_grad_checkpointing_same_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counting_checkpoint(*args, **kwargs):
        calls.append(kwargs.get("use_reentrant"))
        return torch.utils.checkpoint.checkpoint(*args, **kwargs)

    monkeypatch.setattr(resnet, "checkpoint", counting_checkpoint)
    plain = resnet.resnet20().train()
    checkpointed = copy.deepcopy(plain)
    checkpointed.set_grad_checkpointing()
    x = torch.randn(4, 3, 32, 32)
    plain(x).sum().backward()
    checkpointed(x).sum().backward()
    assert calls == [False] * 9  # every residual block went through checkpoint, non-reentrant
    grads = dict(plain.named_parameters())
    for name, p in checkpointed.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, atol=1e-6, rtol=0, msg=name)
    checkpointed.eval()(x)
    assert len(calls) == 9  # not used in eval


@pytest.mark.parametrize(
    ("name", "shape", "hint"),
    [
        ("resnet18", (3, 64, 64), "3-D tensor"),
        ("resnet18", (2, 1, 64, 64), "in_chans=1"),
        ("resnet18", (2, 3, 0, 64), "at least 1x1"),
        ("resnet20", (2, 3, 3, 0), "at least 1x1"),
    ],
)
def test_bad_input_raises_clear_error(name: str, shape: tuple[int, ...], hint: str) -> None:
    model = getattr(resnet, name)()
    min_size = model.min_input_size
    with pytest.raises(ValueError) as info:
        model(torch.randn(shape))
    message = str(info.value)
    assert f"{name} expects input of shape (N, 3, H, W) with H, W >= {min_size}" in message
    assert hint in message and re.search(re.escape(str(shape)), message)


def test_make_divisible_matches_references() -> None:
    for v in [3.0, 7.5, 12.0, 16.0, 30.0, 44.0, 100.0, 129.6, 1000.0]:
        for divisor in (1, 4, 8, 16):
            assert make_divisible(v, divisor) == _make_divisible(v, divisor)
            for round_limit in (0.0, 0.9):
                assert make_divisible(v, divisor, round_limit=round_limit) == timm.layers.make_divisible(
                    v, divisor, round_limit=round_limit
                )


@pytest.mark.parametrize("channels", [64, 256, 2048])
def test_squeeze_excite_matches_references(channels: int) -> None:
    ours = SqueezeExcite(channels)
    reference = timm.layers.SEModule(channels)
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, channels, 4, 4)
    torch.testing.assert_close(ours(x), reference(x))

    hard = SqueezeExcite(channels, rd_channels=channels // 4, gate="hard_sigmoid")
    tv = torchvision.ops.SqueezeExcitation(channels, channels // 4, scale_activation=nn.Hardsigmoid)
    hard.load_state_dict(tv.state_dict(), strict=True)
    torch.testing.assert_close(hard(x), tv(x))
    with pytest.raises(ValueError, match="gate"):
        SqueezeExcite(channels, gate="tanh")
