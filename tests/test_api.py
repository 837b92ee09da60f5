"""zoo.load / save / list_models / info: fine-tuning heads, overrides and clear errors."""

from __future__ import annotations

import io
import json

import pytest
import safetensors.torch
import torch
import torchvision
from published import publish, randomize_batchnorm

import zoo
from zoo.store import download


def _torch_bytes(state_dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    return buffer.getvalue()


@pytest.fixture
def resnet18_published(http_server, monkeypatch):
    torch.manual_seed(0)
    reference = randomize_batchnorm(torchvision.models.resnet18())
    publish(http_server, monkeypatch, "resnet18.tv_in1k", reference.state_dict())
    return reference


def test_list_models_patterns():
    archs = zoo.list_models()
    assert {"resnet18", "resnet50", "seresnet50", "resnet20", "resnext50_32x4d"} <= set(archs)
    assert zoo.list_models("resnet5*") == ["resnet50", "resnet56"]
    assert zoo.list_models(["resnet18", "resnet34"]) == ["resnet18", "resnet34"]
    assert "resnet50" not in zoo.list_models("resnet*", exclude="resnet5*")
    weights = zoo.list_models("resnet50*", pretrained=True)
    assert weights == ["resnet50.tv2_in1k", "resnet50.tv_in1k"]
    assert "seresnet50.a1_in1k" in zoo.list_models(pretrained=True)


@pytest.mark.parametrize(
    "name,suggestion", [("resnet5O", "resnet50"), ("resnet50.tv3_in1k", "resnet50.tv_in1k"), ("renset18", "resnet18")]
)
def test_unknown_name_lists_close_matches(name, suggestion):
    with pytest.raises(zoo.UnknownModelError, match=suggestion):
        zoo.load(name)


def test_architecture_without_weights_says_how_to_build_it():
    with pytest.raises(zoo.UnknownModelError, match=r"pretrained=False"):
        zoo.load("densenet_bc_100")


def test_fine_tuning_head_keeps_body(resnet18_published):
    model = zoo.load("resnet18.tv_in1k", num_classes=7)
    reference = resnet18_published.state_dict()
    for key, value in model.state_dict().items():
        if key.startswith("fc."):
            continue
        assert torch.equal(value, reference[key]), key
    assert model.fc.out_features == 7 and model.num_classes == 7
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 7)
    assert model.pretrained_cfg["categories"] is None
    model.reset_classifier(0)
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, model.num_features)


def test_new_head_is_trainable_and_body_too(resnet18_published):
    model = zoo.load("resnet18.tv_in1k", num_classes=3).train()
    assert all(p.requires_grad and not p.is_meta for p in model.parameters())
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    assert model.fc.weight.grad is not None and model.conv1.weight.grad is not None


@pytest.mark.parametrize("num_classes", [0, -3, 2.5, True, 10**12])  # 10**12: refused before a 2 TB head is built
def test_bad_num_classes_refused(num_classes):
    with pytest.raises(ValueError, match="num_classes must be a positive integer"):
        zoo.load("resnet18", pretrained=False, num_classes=num_classes)


def test_unusable_device_refused_by_name(monkeypatch):
    with pytest.raises(ValueError, match=r"device='gpu' is not a device torch knows; use 'cpu', or 'cuda'"):
        zoo.load("resnet18", pretrained=False, device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    with pytest.raises(ValueError, match=r"device='cuda:1' asked for, but no CUDA GPU is usable here.*device='cpu'"):
        zoo.load("resnet18", pretrained=False, device="cuda:1")


def test_unknown_head_refused():
    with pytest.raises(ValueError, match=r"no head 'lm'.*classification"):
        zoo.load("resnet18", pretrained=False, head="lm")


def test_wrong_input_shape_says_what_is_expected():
    model = zoo.load("resnet18", pretrained=False)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        model(torch.randn(2, 1, 64, 64))


def test_mismatched_keys_are_listed(tmp_path):
    state_dict = torchvision.models.resnet18().state_dict()
    state_dict["layer9.weight"] = state_dict.pop("layer1.0.conv1.weight")
    path = tmp_path / "renamed.safetensors"
    safetensors.torch.save_file(state_dict, path)
    with pytest.raises(zoo.WeightsMismatchError) as error:
        zoo.load("resnet18", weights=path)
    assert "missing keys (1): layer1.0.conv1.weight" in str(error.value)
    assert "unexpected keys (1): layer9.weight" in str(error.value)


def test_local_weights_override_pickle_and_safetensors(tmp_path):
    reference = randomize_batchnorm(torchvision.models.resnet18(num_classes=5)).eval()
    torch.save({"state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, tmp_path / "ckpt.pt")
    safetensors.torch.save_file(reference.state_dict(), tmp_path / "ckpt.safetensors")
    x = torch.randn(1, 3, 64, 64)
    for name in ("ckpt.pt", "ckpt.safetensors"):
        model = zoo.load("resnet18", weights=tmp_path / name, num_classes=5)
        assert torch.allclose(model(x), reference(x), atol=1e-5)
    # A checkpoint with another head size: body kept, fresh head of the asked size.
    model = zoo.load("resnet18", weights=tmp_path / "ckpt.pt", num_classes=3)
    assert torch.equal(model.layer4[1].conv2.weight, reference.layer4[1].conv2.weight)
    assert model.fc.out_features == 3


def test_pickle_with_code_is_refused(tmp_path):
    torch.save({"state_dict": torchvision.models.resnet18().state_dict(), "fn": json.dumps}, tmp_path / "evil.pt")
    with pytest.raises(download.WeightsError, match="weights_only"):
        zoo.load("resnet18", weights=tmp_path / "evil.pt")


def test_url_override_downloads_and_verifies(http_server):
    reference = torchvision.models.resnet18()
    url = http_server.add("resnet18-custom.pth", _torch_bytes(reference.state_dict()))
    with pytest.warns(UserWarning, match="could not be verified"):
        model = zoo.load("resnet18", weights=url)
    assert torch.equal(model.conv1.weight, reference.conv1.weight)


def test_offline_missing_weights_say_where_to_put_them(monkeypatch, zoo_home):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(download.WeightsNotFoundError) as error:
        zoo.load("resnet50.tv_in1k")
    message = str(error.value)
    assert "0676ba61" in message and str(zoo_home) in message


def test_save_and_load_roundtrip(resnet18_published, tmp_path):
    model = zoo.load("resnet18.tv_in1k", num_classes=4)
    with torch.no_grad():
        model.fc.weight.normal_()
    zoo.save(model, tmp_path / "finetuned")
    assert sorted(p.name for p in (tmp_path / "finetuned").iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    restored = zoo.load(tmp_path / "finetuned")
    x = torch.randn(2, 3, 64, 64)
    assert torch.equal(restored(x), model(x))
    assert restored.pretrained_cfg["architecture"] == "resnet18"
    assert restored.pretrained_cfg["preprocess"] == zoo.info("resnet18.tv_in1k").preprocess
    assert zoo.load(tmp_path / "finetuned", num_classes=2)(x).shape == (2, 2)


def test_small_image_model_kwargs_survive_save(tmp_path):
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    zoo.save(model, tmp_path / "r20")
    restored = zoo.load(tmp_path / "r20")
    x = torch.randn(3, 1, 28, 28)
    assert torch.equal(restored(x), model(x))


def test_dtype_and_device(resnet18_published):
    model = zoo.load("resnet18.tv_in1k", dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert not model.training


def test_info_fields():
    info = zoo.info("resnet50.tv_in1k")
    assert info.arch == "resnet50" and info.tag == "tv_in1k"
    assert info.sha256 == "0676ba61" and info.num_params == 25557032
    assert info.metrics["imagenet-1k"]["top1"] == pytest.approx(76.13)
    assert len(info.category_names()) == 1000


def test_gray_input_adapts_pretrained_first_conv(resnet18_published):
    rgb = zoo.load("resnet18.tv_in1k")
    gray = zoo.load("resnet18.tv_in1k", in_chans=1)
    assert gray.conv1.weight.shape == (64, 1, 7, 7)
    x = torch.randn(2, 1, 64, 64)
    with torch.no_grad():
        assert torch.allclose(gray(x), rgb(x.expand(-1, 3, -1, -1)), atol=1e-4)
    assert gray.pretrained_cfg["preprocess"]["channels"] == 1
    assert len(gray.pretrained_cfg["preprocess"]["mean"]) == 1
    four = zoo.load("resnet18.tv_in1k", in_chans=4)
    expected = torch.cat([rgb.conv1.weight, rgb.conv1.weight[:, :1]], dim=1) * 3 / 4
    assert torch.allclose(four.conv1.weight, expected)


def test_features_only(resnet18_published, tmp_path):
    model = zoo.load("resnet18.tv_in1k", features_only=True, out_indices=(1, -1))
    assert model.feature_info.reduction() == [4, 32]
    assert model.feature_info.channels() == [64, 512]
    assert model.feature_info.module_name() == ["layer1", "layer4"] and len(model.feature_info) == 5  # timm's
    x = torch.randn(2, 3, 64, 64)
    features = model(x)
    assert [tuple(f.shape) for f in features] == [(2, 64, 16, 16), (2, 512, 2, 2)]
    with torch.no_grad():
        assert torch.equal(features[-1], zoo.load("resnet18.tv_in1k").forward_features(x))
    zoo.save(model, tmp_path / "backbone")
    restored = zoo.load(tmp_path / "backbone")
    assert all(torch.equal(a, b) for a, b in zip(restored(x), model(x)))
    with pytest.raises(ValueError, match="levels 0..4"):
        zoo.load("resnet18", pretrained=False, features_only=True, out_indices=(5,))
    with pytest.raises(ValueError, match="no num_classes"):
        zoo.load("resnet18", pretrained=False, features_only=True, num_classes=3)


def test_checkpoint_without_num_batches_tracked_loads(tmp_path):
    """Checkpoints saved before PyTorch 0.4.1 (torchvision's oldest files) have no BN counter."""
    reference = randomize_batchnorm(torchvision.models.resnet18()).eval()
    old = {k: v for k, v in reference.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save(old, tmp_path / "old.pth")
    model = zoo.load("resnet18", weights=tmp_path / "old.pth")
    assert model.bn1.num_batches_tracked == 0
    x = torch.randn(1, 3, 64, 64)
    assert torch.equal(model(x), reference(x))
