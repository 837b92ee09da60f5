"""Shared blocks: ConvNormAct, DropPath, DepthwiseSeparable, InvertedResidual (torchvision's
key layouts and numerics), SqueezeExcite's gates."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torchvision.models.mobilenetv2 as tv_v2
import torchvision.models.mobilenetv3 as tv_v3
from published import randomize_batchnorm
from torch import nn
from torchvision.ops import Conv2dNormActivation, SqueezeExcitation

from zoo.architectures.layers import (
    ConvNormAct,
    DepthwiseSeparable,
    DropPath,
    InvertedResidual,
    SqueezeExcite,
    make_divisible,
)


def _same_state_and_output(ours: nn.Module, reference: nn.Module, x: torch.Tensor) -> None:
    """Equal state-dict keys and shapes; equal eval outputs once ours holds the reference's tensors."""
    randomize_batchnorm(reference)
    expected = {k: v.shape for k, v in reference.state_dict().items()}
    assert {k: v.shape for k, v in ours.state_dict().items()} == expected
    ours.load_state_dict(reference.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), reference.eval()(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "act"),
    [
        (dict(kernel_size=3, stride=2), nn.ReLU),
        (dict(kernel_size=5, groups=8), nn.Hardswish),
        (dict(kernel_size=1), None),
    ],
)
def test_conv_norm_act_equals_torchvision(kwargs, act):
    ours = ConvNormAct(8, 16, act_layer=act, **kwargs)
    reference = Conv2dNormActivation(8, 16, activation_layer=act, **kwargs)
    assert list(ours.state_dict()) == list(reference.state_dict())  # 0.weight, 1.weight, 1.bias...
    assert ours[0].bias is None and len(ours) == (2 if act is None else 3)
    _same_state_and_output(ours, reference, torch.randn(2, 8, 9, 9))


def test_conv_norm_act_norm_layer():
    norm = ConvNormAct(4, 4, 3, norm_layer=partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01))[1]
    assert (norm.eps, norm.momentum) == (1e-3, 0.01)


def test_drop_path_identity_in_eval_and_at_zero():
    x = torch.randn(8, 4, 3, 3)
    assert DropPath(0.5).eval()(x) is x
    assert DropPath(0.0).train()(x) is x
    with pytest.raises(ValueError, match="drop-path"):
        DropPath(1.0)


def test_drop_path_drops_whole_samples_and_keeps_the_mean():
    torch.manual_seed(0)
    p = 0.3
    out = DropPath(p).train()(torch.ones(20_000, 2, 2, 2))
    per_sample = out.flatten(1)
    assert torch.equal(per_sample.min(1).values, per_sample.max(1).values)  # one decision per sample
    kept = per_sample[:, 0] > 0
    assert torch.allclose(per_sample[kept], torch.full_like(per_sample[kept], 1 / (1 - p)))
    assert 1 - kept.float().mean().item() == pytest.approx(p, abs=0.015)
    assert out.mean().item() == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    ("in_chs", "out_chs", "stride", "residual"), [(16, 16, 1, True), (16, 16, 2, False), (16, 24, 1, False)]
)
def test_inverted_residual_adds_input_only_at_stride_1_and_equal_channels(in_chs, out_chs, stride, residual):
    block = InvertedResidual(in_chs, out_chs, 4 * in_chs, stride=stride).eval()
    assert block.has_residual == residual
    with torch.no_grad():
        last_bn = block.conv[-1]
        last_bn.weight.zero_()
        last_bn.bias.zero_()  # the branch now outputs zeros
        x = torch.randn(2, in_chs, 8, 8)
        out = block(x)
    if residual:
        assert torch.equal(out, x)
    else:
        assert out.shape == (2, out_chs, 8 // stride, 8 // stride) and not out.any()


def test_inverted_residual_drop_path_on_the_branch_only():
    torch.manual_seed(0)
    block = InvertedResidual(8, 8, 32, drop_path_rate=0.5).train()
    x = torch.randn(64, 8, 4, 4)
    with torch.no_grad():
        branch = block.conv(x)
        out = block(x) - x
    dropped = (out.flatten(1) == 0).all(1)
    assert 10 < dropped.sum() < 54  # some samples lost their branch, the rest kept it, doubled
    torch.testing.assert_close(out[~dropped], 2 * branch[~dropped])


@pytest.mark.parametrize(("in_chs", "out_chs", "stride", "t"), [(16, 16, 1, 6), (32, 16, 1, 1), (24, 32, 2, 6)])
def test_inverted_residual_v2_layout_equals_torchvision(in_chs, out_chs, stride, t):
    reference = tv_v2.InvertedResidual(in_chs, out_chs, stride, expand_ratio=t)
    ours = InvertedResidual(in_chs, out_chs, round(in_chs * t), stride=stride, act_layer=nn.ReLU6, layout="v2")
    _same_state_and_output(ours, reference, torch.randn(2, in_chs, 8, 8))


@pytest.mark.parametrize(
    "row",
    [(16, 3, 16, 16, True, "RE", 2, 1), (40, 5, 240, 40, True, "HS", 1, 1), (24, 3, 72, 24, False, "RE", 1, 1)],
)
def test_inverted_residual_v3_layout_equals_torchvision(row):
    cnf = tv_v3.InvertedResidualConfig(*row, width_mult=1.0)
    norm = partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01)
    reference = tv_v3.InvertedResidual(cnf, norm)
    rd_channels = make_divisible(cnf.expanded_channels // 4, 8)  # torchvision's squeeze width
    se = partial(SqueezeExcite, rd_channels=rd_channels, gate="hard_sigmoid") if cnf.use_se else None
    ours = InvertedResidual(
        cnf.input_channels,
        cnf.out_channels,
        cnf.expanded_channels,
        cnf.kernel,
        cnf.stride,
        act_layer=nn.Hardswish if cnf.use_hs else nn.ReLU,
        se_layer=se,
        norm_layer=norm,
        layout="v3",
    )
    assert any(".fc1." in k for k in ours.state_dict()) == cnf.use_se  # block.2.fc1.weight
    _same_state_and_output(ours, reference, torch.randn(2, cnf.input_channels, 8, 8))
    with pytest.raises(ValueError, match="layout"):
        InvertedResidual(8, 8, 8, layout="v4")


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_separable_is_dw_se_pw(stride):
    se_layer = partial(SqueezeExcite, rd_channels=8)
    ours = DepthwiseSeparable(16, 32, stride, se_layer=se_layer)
    reference = nn.Sequential()
    reference.add_module("dw", Conv2dNormActivation(16, 16, 3, stride, groups=16))
    reference.add_module("se", SqueezeExcitation(16, 8))
    reference.add_module("pw", Conv2dNormActivation(16, 32, 1))
    _same_state_and_output(ours, reference, torch.randn(2, 16, 8, 8))
    assert not any("se" in k for k in DepthwiseSeparable(16, 32).state_dict())


@pytest.mark.parametrize(
    ("gate", "expected"), [("sigmoid", torch.sigmoid), ("hard_sigmoid", nn.functional.hardsigmoid)]
)
def test_squeeze_excite_gate(gate, expected):
    se = SqueezeExcite(8, rd_channels=4, gate=gate)
    with torch.no_grad():
        se.fc2.weight.zero_()
        se.fc2.bias.fill_(1.0)  # every channel's pre-gate scale is 1
        x = torch.randn(2, 8, 3, 3)
        torch.testing.assert_close(se(x), x * expected(torch.tensor(1.0)))
