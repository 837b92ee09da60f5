"""MobileNet family (entries: tests/test_entries.py, test_parity.py): train-mode gradients,
MobileNetV1, width multipliers, small-image variants, squeeze-excite options, the model and
feature-extraction contracts, gradient checkpointing."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torchvision
from published import publish, randomize_batchnorm, randomize_linear
from torch import nn

import zoo
from zoo.architectures import mobilenet
from zoo.architectures.layers import DepthwiseSeparable, InvertedResidual, SqueezeExcite


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "mobilenet_v2"])
def test_train_gradients_match_torchvision(name):
    torch.manual_seed(0)
    reference = getattr(torchvision.models, name)()
    ours = getattr(mobilenet, name)()
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(4, 3, 64, 64)
    torch.manual_seed(1)  # the same dropout mask in both heads
    out_ref = reference.train()(x)
    torch.manual_seed(1)
    out = ours.train()(x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=0)
    out_ref.square().sum().backward()
    out.square().sum().backward()
    ref_params = dict(reference.named_parameters())
    for key, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, ref_params[key].grad, atol=1e-5, rtol=1e-4, msg=key)
    ref_buffers = dict(reference.named_buffers())
    for key, b in ours.named_buffers():  # BN running statistics updated the same way (V3: momentum 0.01)
        torch.testing.assert_close(b, ref_buffers[key], atol=1e-6, rtol=0, msg=key)


@pytest.mark.parametrize(
    ("name", "width_mult"), [("mobilenet_v2", 0.5), ("mobilenet_v3_large", 0.75), ("mobilenet_v3_small", 1.4)]
)
def test_width_mult_equals_torchvision(name, width_mult):
    reference = randomize_linear(randomize_batchnorm(getattr(torchvision.models, name)(width_mult=width_mult))).eval()
    ours = getattr(mobilenet, name)(width_mult=width_mult).eval()
    assert _num_params(ours) == _num_params(reference) != _num_params(getattr(mobilenet, name)())
    ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), atol=1e-5, rtol=0)


def test_mobilenet_v1():
    model = mobilenet.mobilenet_v1()
    assert _num_params(model) == 4_231_976  # as in the common PyTorch ports at 1000 classes
    blocks = list(model.features)[1:]
    assert len(blocks) == 13 and all(isinstance(b, DepthwiseSeparable) for b in blocks)
    assert [b.dw[0].stride[0] for b in blocks] == [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    assert model.features[0][0].stride == (2, 2) and model.num_features == 1024
    half = mobilenet.mobilenet_v1(width_mult=0.5)
    assert half.num_features == 512 and half.features[0][0].out_channels == 16
    assert _num_params(half) == 1_331_592
    x = torch.randn(1, 3, 64, 64)
    assert model.eval()(x).shape == (1, 1000)


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("mobilenet_v1_cifar", "mobilenet_v1"),
        ("mobilenet_v2_cifar", "mobilenet_v2"),
        ("mobilenet_v3_small_cifar", "mobilenet_v3_small"),
    ],
)
def test_small_input_variants(name, base):
    model = getattr(mobilenet, name)(in_chans=1).eval()
    assert model.num_classes == 10 and model.feature_info[-1]["reduction"] == 8 and model.min_input_size == 1
    assert [info["reduction"] for info in model.feature_info] == [1, 2, 4, 8]
    assert model.features[0][0].stride == (1, 1)
    same = getattr(mobilenet, base)(small_input=True, num_classes=10, in_chans=1)
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert {k: v.shape for k, v in same.state_dict().items()} == shapes
    with torch.no_grad():
        assert model(torch.randn(1, 1, 28, 28)).shape == (1, 10)
        assert model.forward_features(torch.randn(1, 1, 28, 28)).shape[2:] == (4, 4)  # ceil(28 / 8)
        assert model.forward_features(torch.randn(1, 1, 32, 32)).shape[2:] == (4, 4)
        imagenet = getattr(mobilenet, base)(in_chans=1).eval()
        assert imagenet.forward_features(torch.randn(1, 1, 32, 32)).shape[2:] == (1, 1)


@pytest.mark.parametrize(("name", "gated"), [("mobilenet_v1", DepthwiseSeparable), ("mobilenet_v2", InvertedResidual)])
def test_se_ratio_adds_a_gate_after_each_depthwise_conv(name, gated):
    plain = getattr(mobilenet, name)()
    model = getattr(mobilenet, name)(se_ratio=0.25).eval()
    assert not any(isinstance(m, SqueezeExcite) for m in plain.modules())
    blocks = [m for m in model.modules() if isinstance(m, gated)]
    gates = [m for m in model.modules() if isinstance(m, SqueezeExcite)]
    assert len(gates) == len(blocks) in (13, 17) and all(isinstance(g.gate, nn.Sigmoid) for g in gates)
    assert _num_params(model) == _num_params(plain) + sum(_num_params(g) for g in gates)
    for block in blocks:  # between the depthwise conv and the pointwise (V1) or projection (V2) conv
        layers = list(block.children()) if gated is DepthwiseSeparable else list(block.conv)
        i = next(i for i, m in enumerate(layers) if isinstance(m, SqueezeExcite))
        assert layers[i - 1][0].groups == layers[i].fc1.in_channels > 1
        assert isinstance(layers[i + 1], (nn.Conv2d, nn.Sequential))
    called = []
    for g in gates:
        g.register_forward_hook(lambda *_: called.append(True))
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    assert len(called) == len(gates)


@pytest.mark.parametrize(
    ("name", "size", "num_features", "hidden"),
    [
        ("mobilenet_v1", 64, 1024, None),
        ("mobilenet_v2", 64, 1280, None),
        ("mobilenet_v3_large", 64, 960, 1280),
        ("mobilenet_v3_small", 64, 576, 1024),
        ("mobilenet_v2_cifar", 32, 1280, None),
    ],
)
def test_model_contract(name, size, num_features, hidden):
    model = getattr(mobilenet, name)().eval()
    assert model.num_features == num_features and model.in_chans == 3 and model.pretrained_cfg == {}
    first = model.get_submodule(model.first_conv)
    assert first is next(m for m in model.modules() if isinstance(m, nn.Conv2d)) and first.in_channels == 3
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        features = model.forward_features(x)
        stride = model.feature_info[-1]["reduction"]
        assert features.shape == (2, num_features, size // stride, size // stride)
        pooled = model.global_pool(features)
        assert pooled.shape == (2, num_features)
        torch.testing.assert_close(model(x), model.classifier(pooled))
        pre_logits = model.forward_head(features, pre_logits=True)  # timm's: V3 after its hidden layer
        torch.testing.assert_close(pre_logits, model.classifier[:-2](pooled) if hidden else pooled)
        assert pre_logits.shape == (2, model.head_hidden_size)
        classifier = model.get_classifier()
        assert classifier is model.classifier[-1] and isinstance(classifier, nn.Linear)
        assert classifier.in_features == (hidden or num_features) == model.head_hidden_size

        body = copy.deepcopy(model.classifier[:-1])
        model.reset_classifier(7)
        assert (model.get_classifier().out_features, model.num_classes) == (7, 7)
        assert model(x).shape == (2, 7)
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), body(pooled))  # the hidden layer (V3) stays
        assert model(x).shape == (2, hidden or num_features)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="num_classes"):
            model.reset_classifier(bad)
    with pytest.raises(ValueError, match="num_classes"):
        getattr(mobilenet, name)(num_classes=-3)
    with pytest.raises(ValueError, match=rf"{name} expects .*in_chans=1"):
        model(torch.randn(2, 1, size, size))
    smallest = model.min_input_size  # the smallest side that runs, not the stride
    with pytest.raises(ValueError, match=f"at least {smallest}x{smallest}"):
        model(torch.randn(2, 3, smallest - 1, size))
    assert model(torch.randn(2, 3, smallest, size)).shape[0] == 2


@pytest.mark.parametrize(
    ("name", "channels", "timm_name"),
    [
        ("mobilenet_v1", [64, 128, 256, 512, 1024], None),
        ("mobilenet_v2", [16, 24, 32, 96, 320], "mobilenetv2_100"),
        ("mobilenet_v3_large", [16, 24, 40, 112, 960], "mobilenetv3_large_100"),
        ("mobilenet_v3_small", [16, 16, 24, 48, 576], "mobilenetv3_small_100"),
        ("mobilenet_v3_small_cifar", [16, 24, 48, 576], None),
    ],
)
def test_feature_levels(name, channels, timm_name):
    model = getattr(mobilenet, name)().eval()
    assert [info["num_chs"] for info in model.feature_info] == channels
    if timm_name is not None:
        reference = timm.create_model(timm_name, features_only=True).feature_info
        assert reference.channels() == channels
        assert reference.reduction() == [info["reduction"] for info in model.feature_info]
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        final, levels = model.forward_intermediates(x)
        assert len(levels) == len(channels)
        for info, feature in zip(model.feature_info, levels):
            r = info["reduction"]
            assert feature.shape == (1, info["num_chs"], 64 // r, 64 // r), info
            assert model.get_submodule(info["module"]) is not None
        torch.testing.assert_close(final, model.forward_features(x))  # V2: after its last conv, no level

        reached = []
        deepest = int(model.feature_info[-2]["module"].split(".")[1])
        model.features[deepest + 1].register_forward_hook(lambda *_: reached.append(True))
        final, subset = model.forward_intermediates(x, [-2, 1], stop_early=True)
        assert not reached  # stops after the deepest level asked for
        assert len(subset) == 2
        torch.testing.assert_close(final, levels[-2])
        torch.testing.assert_close(subset[0], levels[1])
        torch.testing.assert_close(subset[1], levels[-2])
    with pytest.raises(ValueError, match="level"):
        model.forward_intermediates(x, [len(channels)])


def test_grad_checkpointing_same_gradients(monkeypatch):
    calls = []

    def counting_checkpoint(*args, **kwargs):
        calls.append(kwargs.get("use_reentrant"))
        return torch.utils.checkpoint.checkpoint(*args, **kwargs)

    monkeypatch.setattr(mobilenet, "checkpoint", counting_checkpoint)
    plain = mobilenet.mobilenet_v3_small_cifar(drop_path_rate=0.2).train()
    checkpointed = copy.deepcopy(plain)
    checkpointed.set_grad_checkpointing()
    x = torch.randn(4, 3, 32, 32)
    torch.manual_seed(0)  # same drop-path and dropout masks in both
    plain(x).square().sum().backward()
    torch.manual_seed(0)
    checkpointed(x).square().sum().backward()
    assert calls == [False] * len(checkpointed.features)  # every module of features, non-reentrant
    grads = dict(plain.named_parameters())
    for key, p in checkpointed.named_parameters():
        torch.testing.assert_close(p.grad, grads[key].grad, atol=1e-6, rtol=1e-5, msg=key)
    checkpointed.eval()(x)
    assert len(calls) == len(checkpointed.features)  # not used in eval


def test_drop_rates():
    model = mobilenet.mobilenet_v2(drop_rate=0.5, drop_path_rate=0.17)
    assert model.classifier[0].p == 0.5
    rates = [block.drop_path.p for block in list(model.features)[1:-1]]
    assert rates == pytest.approx([0.17 * i / 17 for i in range(17)])
    assert mobilenet.mobilenet_v3_large().classifier[2].p == 0.2  # torchvision's default


def test_new_head_and_channels_from_v3_checkpoint(http_server, monkeypatch):
    """num_classes replaces only the final Linear (the pretrained hidden layer stays);
    in_chans=1 sums the first conv's RGB filters."""
    torch.manual_seed(0)
    reference = torchvision.models.mobilenet_v3_small()
    publish(http_server, monkeypatch, "mobilenet_v3_small.tv_in1k", reference.state_dict())
    model = zoo.load("mobilenet_v3_small.tv_in1k", num_classes=7, in_chans=1)
    assert torch.equal(model.classifier[0].weight, reference.classifier[0].weight)
    assert model.get_classifier().out_features == 7
    expected = reference.features[0][0].weight.sum(1, keepdim=True)
    torch.testing.assert_close(model.features[0][0].weight, expected)
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, 7)


def test_all_builders_registered():
    names = [
        "mobilenet_v1",
        "mobilenet_v2",
        "mobilenet_v3_large",
        "mobilenet_v3_small",
        "mobilenet_v1_cifar",
        "mobilenet_v2_cifar",
        "mobilenet_v3_small_cifar",
    ]
    assert set(names) <= set(zoo.list_models())
    assert zoo.info("mobilenet_v3_large").name == "mobilenet_v3_large.tv2_in1k"
