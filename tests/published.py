"""Serve a state dict in its publisher's file format from the local HTTP server and point a
registered weight entry at it, so tests go through the real entry machinery."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re

import pytest
import safetensors.torch
import torch

from zoo.store import weight_entries


def randomize_batchnorm(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every BatchNorm non-trivial statistics and affine terms, so parity means something."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)
    return model


@torch.no_grad()
def randomize_linear(model: torch.nn.Module) -> torch.nn.Module:
    """Linear layers of unit gain: torchvision's N(0, 0.01) init leaves e.g. MobileNetV3's
    logits near 0.005, too small for an absolute tolerance to mean much."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.normal_(module.weight, 0, module.in_features**-0.5)
            torch.nn.init.normal_(module.bias, 0, 0.1)
    return model


def legacy_densenet_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A current torchvision DenseNet state dict as torchvision's published 2017 files have
    it: ``denselayerN.norm.1.weight`` keys and no ``num_batches_tracked``."""
    return {
        re.sub(r"(denselayer\d+\.(?:norm|conv))([12])\.", r"\1.\2.", k): v
        for k, v in state_dict.items()
        if not k.endswith("num_batches_tracked")
    }


def publish(
    http_server,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    state_dict: dict[str, torch.Tensor],
    *,
    fmt: str = "pth",
) -> weight_entries.WeightInfo:
    """Serve ``state_dict`` as torchvision (``pth``, hash prefix in the file name) or Hugging Face
    hub (``safetensors``, sha256 in the X-Linked-Etag header) would, and re-point entry ``name``."""
    if fmt == "pth":
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        data = buffer.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        url = http_server.add(f"{name.replace('.', '_')}-{digest[:8]}.pth", data)
        sha256 = digest[:8]
    else:
        data = safetensors.torch.save({k: v.contiguous() for k, v in state_dict.items()})
        digest = hashlib.sha256(data).hexdigest()
        url = http_server.add(f"{name}/model.safetensors", data, headers={"X-Linked-Etag": f'"{digest}"'})
        sha256 = None
    entry = dataclasses.replace(weight_entries.info(name), url=url, sha256=sha256)
    monkeypatch.setitem(weight_entries._weights, name, entry)
    return entry
