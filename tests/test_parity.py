"""Published weights through the whole entry machinery: the publisher's file is served over
HTTP, `zoo.load` downloads, verifies, converts and loads it, and the outputs equal the
reference implementation's on the same input."""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from published import legacy_densenet_keys, publish, randomize_batchnorm, randomize_linear

import zoo

TORCHVISION_ENTRIES = [
    name
    for name in zoo.list_models(pretrained=True)
    if (zoo.info(name).url or "").startswith("https://download.pytorch.org/")
]


def _max_abs_diff(reference: torch.nn.Module, model: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return (reference.eval()(x) - model.eval()(x)).abs().max().item()


@pytest.mark.parametrize("name", TORCHVISION_ENTRIES)
def test_torchvision_checkpoint_loads_with_equal_outputs(name, http_server, monkeypatch):
    arch = name.split(".")[0]
    torch.manual_seed(0)
    reference = randomize_linear(randomize_batchnorm(getattr(torchvision.models, arch)())).eval()
    published = reference.state_dict()
    if arch.startswith("densenet"):
        published = legacy_densenet_keys(published)
        assert any(".norm.1." in k for k in published)
    publish(http_server, monkeypatch, name, published)
    model = zoo.load(name)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(x)
    assert expected.std() > 0.1  # not two near-constant outputs
    assert _max_abs_diff(reference, model, x) <= 1e-5
    assert sum(p.numel() for p in model.parameters()) == zoo.info(name).num_params
    assert model.pretrained_cfg["weights"] == name


def test_timm_seresnet50_from_hub_safetensors(http_server, monkeypatch):
    torch.manual_seed(0)
    reference = randomize_batchnorm(timm.create_model("seresnet50", pretrained=False))
    publish(http_server, monkeypatch, "seresnet50.a1_in1k", reference.state_dict(), fmt="safetensors")
    model = zoo.load("seresnet50.a1_in1k")
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        scale = reference.eval()(x).abs().max().item()
    # 1e-5 relative to the logits' size: with random BatchNorm statistics they reach ~10, where
    # the float32 rounding of different (thread-count dependent) conv kernels shows up at 1e-5
    assert _max_abs_diff(reference, model, x) <= 1e-5 * max(1.0, scale)
    assert sum(p.numel() for p in model.parameters()) == zoo.info("seresnet50.a1_in1k").num_params


def test_converted_file_is_reused_offline(http_server, monkeypatch):
    """After the first load the pickle is converted to safetensors once; offline loads use it."""
    torch.manual_seed(0)
    reference = torchvision.models.resnet18()
    publish(http_server, monkeypatch, "resnet18.tv_in1k", reference.state_dict())
    zoo.load("resnet18.tv_in1k")
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    model = zoo.load("resnet18.tv_in1k")
    assert len(http_server.requests) == 1
    assert _max_abs_diff(reference, model, torch.randn(1, 3, 64, 64)) <= 1e-5
