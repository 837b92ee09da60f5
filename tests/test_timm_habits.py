"""timm's names with timm's meaning (issue 23): ``pretrained_cfg`` that timm's data config reads,
``forward_intermediates``/``feature_info``/``reset_classifier`` as timm's models have them, and
``zoo.create_model`` as ``timm.create_model``; each compared with timm itself, on shared weights."""

from __future__ import annotations

import copy
import math

import pytest
import safetensors.torch
import timm
import timm.data
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image
from published import randomize_batchnorm
from sklearn.datasets import load_sample_image
from timm.models._features import FeatureInfo as TimmFeatureInfo
from timm.models._features import feature_take_indices as timm_feature_take_indices

import zoo
from zoo.architectures.features import FeatureInfo, feature_take_indices
from zoo.errors import WeightsMismatchError

VISION_ENTRIES = [
    name
    for name in zoo.list_models(pretrained=True)
    if zoo.store.weight_entries.input_kind(name.split(".")[0]) == "images"
]


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    """A real photograph (scikit-learn ships it) cut to an odd, non-square size."""
    return Image.fromarray(load_sample_image("china.jpg")).crop((17, 40, 17 + 301, 40 + 253))


@pytest.mark.parametrize("name", VISION_ENTRIES)
def test_timm_data_config_reproduces_zoo_transforms(name, photo):
    entry = zoo.info(name)
    if entry.file is not None:  # bundled: the weights themselves load offline
        model = zoo.load(name)
    else:  # published: the entry's architecture and cfg, without downloading its weights
        with torch.device("meta"):
            model = zoo.load(name, pretrained=False)
    config = timm.data.resolve_model_data_config(model)
    preprocess = entry.preprocess
    assert config["input_size"] == (len(preprocess["mean"]), preprocess["crop"], preprocess["crop"])
    assert config["interpolation"] == preprocess.get("interpolation", "bilinear")
    assert list(config["mean"]) == preprocess["mean"] and list(config["std"]) == preprocess["std"]
    assert config["crop_mode"] == "center"
    assert math.floor(preprocess["crop"] / config["crop_pct"]) == preprocess["resize"]  # timm's resize rule
    image = photo.convert("L" if len(preprocess["mean"]) == 1 else "RGB")
    expected = zoo.transforms(name)(image)
    actual = timm.data.create_transform(**config)(image)
    assert actual.shape == expected.shape == (len(preprocess["mean"]), preprocess["crop"], preprocess["crop"])
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)


def test_pretrained_cfg_keys_of_a_gray_small_image_model():
    model = zoo.load("resnet20.fmnist")
    cfg = model.pretrained_cfg
    assert timm.data.resolve_model_data_config(model)["input_size"] == (1, 28, 28)
    assert (cfg["first_conv"], cfg["classifier"], cfg["num_classes"], cfg["pool_size"]) == ("conv1", "fc", 10, (7, 7))
    assert cfg["tag"] == "fmnist" and cfg["license"] == zoo.info("resnet20.fmnist").license
    rgb = zoo.load("resnet20.fmnist", in_chans=3)  # the first conv adapted: three channels in
    assert timm.data.resolve_model_data_config(rgb)["input_size"] == (3, 28, 28)
    untrained = zoo.load("mobilenet_v3_small_cifar", pretrained=False, in_chans=1)  # no weights anywhere
    assert (
        untrained.pretrained_cfg["input_size"] == (1, 32, 32)
        and untrained.pretrained_cfg["classifier"] == "classifier.3"
    )
    overlaid = zoo.create_model("resnet20", pretrained_cfg_overlay={"crop_pct": 0.5})
    assert timm.data.resolve_model_data_config(overlaid)["crop_pct"] == 0.5


# ----------------------------------------------------------------------------- feature levels


@given(
    num_levels=st.integers(1, 7),
    indices=st.none() | st.integers(-2, 9) | st.lists(st.integers(-9, 9), min_size=1, max_size=4),
)
def test_feature_take_indices_as_timm(num_levels, indices):
    try:
        expected = timm_feature_take_indices(num_levels, indices)
    except AssertionError:
        with pytest.raises(ValueError, match="level"):
            feature_take_indices(num_levels, indices)
    else:
        assert feature_take_indices(num_levels, indices) == expected


def test_feature_info_as_timm():
    levels = [dict(num_chs=16 * 2**i, reduction=2**i, module=f"stage{i}") for i in range(5)]
    ours, theirs = FeatureInfo(levels, (1, 3, 4)), TimmFeatureInfo([dict(d) for d in levels], (1, 3, 4))
    for idx in (None, 2, [0, 4]):
        assert ours.channels(idx) == theirs.channels(idx)
        assert ours.reduction(idx) == theirs.reduction(idx)
        assert ours.module_name(idx) == theirs.module_name(idx)
    assert ours.get_dicts(keys=["num_chs"]) == theirs.get_dicts(keys=["num_chs"])
    assert len(ours) == len(theirs) and ours[-1]["reduction"] == theirs[-1]["reduction"] == 16
    assert [d["module"] for d in ours] == [d["module"] for d in theirs.info]


def _timm_checkpoint(name: str, tmp_path_factory: pytest.TempPathFactory, fmt: str) -> tuple[torch.nn.Module, str]:
    """timm's model with random BatchNorm statistics, saved as a timm training checkpoint
    (``{"state_dict": ..., "epoch": ...}``) or as safetensors."""
    torch.manual_seed(0)
    reference = randomize_batchnorm(timm.create_model(name)).eval()
    path = tmp_path_factory.mktemp(name) / f"{name}.{'pth.tar' if fmt == 'pth' else 'safetensors'}"
    if fmt == "pth":
        torch.save({"state_dict": reference.state_dict(), "epoch": 3, "arch": name}, path)
    else:
        safetensors.torch.save_model(reference, str(path))
    return reference, str(path)


@pytest.fixture(scope="module", params=[("resnet50", "pth"), ("densenet121", "safetensors")], ids=lambda p: p[0])
def pair(request, tmp_path_factory):
    """timm's model and zoo's, the same weights loaded through ``checkpoint_path``."""
    name, fmt = request.param
    reference, path = _timm_checkpoint(name, tmp_path_factory, fmt)
    model = zoo.create_model(name, checkpoint_path=path).eval()
    return reference, model


X = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))  # small: densenet121 runs from 29 px


@pytest.mark.parametrize(
    ("indices", "stop_early"), [(None, False), (2, True), ([0, 3], False), ([-1, -3], True), ([1], True)]
)
def test_forward_intermediates_equal_timm(pair, indices, stop_early):
    reference, model = pair
    with torch.no_grad():
        final_ref, maps_ref = reference.forward_intermediates(X, indices=indices, stop_early=stop_early)
        final, maps = model.forward_intermediates(X, indices=indices, stop_early=stop_early)
        only = model.forward_intermediates(X, indices=indices, intermediates_only=True)
    assert len(maps) == len(maps_ref) == len(only)
    for ours, theirs, alone in zip(maps, maps_ref, only):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(alone, ours)
    torch.testing.assert_close(final, final_ref, rtol=1e-4, atol=1e-4)


def test_outputs_and_feature_info_equal_timm(pair):
    reference, model = pair
    with torch.no_grad():
        torch.testing.assert_close(model(X), reference(X), rtol=1e-4, atol=1e-4)
    assert model.feature_info.channels() == [level["num_chs"] for level in reference.feature_info]
    assert model.feature_info.reduction() == [level["reduction"] for level in reference.feature_info]


@pytest.mark.parametrize("global_pool", ["max", "avgmax", "catavgmax"])
def test_reset_classifier_pools_as_timm(pair, global_pool):
    reference, model = (copy.deepcopy(m) for m in pair)
    reference.reset_classifier(5, global_pool=global_pool)
    model.reset_classifier(5, global_pool=global_pool)
    model.get_classifier().load_state_dict(reference.get_classifier().state_dict())
    assert model.head_hidden_size == reference.head_hidden_size and model.num_features == reference.num_features
    with torch.no_grad():
        torch.testing.assert_close(model(X), reference(X), rtol=1e-4, atol=1e-4)
        reference.reset_classifier(0, global_pool="")
        model.reset_classifier(0, global_pool="")
        torch.testing.assert_close(model(X), reference(X), rtol=1e-4, atol=1e-4)  # the unpooled maps


def test_prune_intermediate_layers_as_timm(pair):
    reference, model = (copy.deepcopy(m) for m in pair)
    assert model.prune_intermediate_layers([1, -3]) == reference.prune_intermediate_layers([1, -3]) == [1, 2]
    assert model.state_dict().keys() == reference.state_dict().keys()  # the same layers dropped
    assert model.num_features == reference.num_features and model.num_classes == 0
    with torch.no_grad():
        torch.testing.assert_close(model(X), reference(X), rtol=1e-4, atol=1e-4)  # the deepest kept map
        ours = model.forward_intermediates(X, indices=[1, 2], intermediates_only=True)
        theirs = reference.forward_intermediates(X, indices=[1, 2], intermediates_only=True)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_features_only_out_indices_as_timm():
    torch.manual_seed(0)
    reference = timm.create_model("resnet18").eval()
    theirs = timm.create_model("resnet18", features_only=True, out_indices=2)
    backbone = zoo.create_model("resnet18", features_only=True, out_indices=2)
    backbone.model.load_state_dict({k: v for k, v in reference.state_dict().items() if not k.startswith("fc.")})
    assert backbone.feature_info.channels() == theirs.feature_info.channels() == [256, 512]
    assert backbone.feature_info.reduction() == theirs.feature_info.reduction()
    with torch.no_grad():
        maps = backbone.eval()(X)
        expected = reference.forward_intermediates(X, indices=2, intermediates_only=True)
    assert len(maps) == 2
    for ours, ref in zip(maps, expected):
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- create_model


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("resnet18", {}),
        ("resnet18", {"num_classes": 0}),
        ("resnet34", {"num_classes": 3, "in_chans": 1, "global_pool": "catavgmax"}),
        ("mobilenetv2_100", {"num_classes": 5}),
        ("mobilenetv3_large_100", {"global_pool": "max"}),
        ("mobilenetv3_small_100", {"num_classes": 0}),
    ],
)
def test_create_model_as_timm(name, kwargs):
    theirs, ours = timm.create_model(name, **kwargs), zoo.create_model(name, **kwargs)
    assert ours.training == theirs.training  # timm returns its models in training mode
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert ours.num_classes == theirs.num_classes and ours.num_features == theirs.num_features
    x = torch.randn(2, kwargs.get("in_chans", 3), 64, 64)
    with torch.no_grad():
        assert ours.eval()(x).shape == theirs.eval()(x).shape
    timm_levels = timm.create_model(name, features_only=True, in_chans=kwargs.get("in_chans", 3)).feature_info
    assert ours.feature_info.channels() == timm_levels.channels()
    assert ours.feature_info.reduction() == timm_levels.reduction()


def test_checkpoint_of_another_head_names_the_mismatch(tmp_path):
    path = tmp_path / "resnet18.pth"
    torch.save(timm.create_model("resnet18").state_dict(), path)
    with pytest.raises(
        WeightsMismatchError, match=r"(?s)fc\.weight \(1000, 512\) vs model \(7, 512\).*checkpoint_path"
    ):
        zoo.create_model("resnet18", num_classes=7, checkpoint_path=path)


@pytest.mark.parametrize(
    ("name", "call", "match"),
    [
        ("resnet18", lambda m: m.reset_classifier(3, global_pool="token"), "global_pool must be one of"),
        ("resnet18", lambda m: m.reset_classifier(3, global_pool=""), "pass num_classes=0"),
        ("mobilenet_v3_small", lambda m: m.reset_classifier(3, global_pool="catavgmax"), "cannot take global_pool"),
        ("resnet18", lambda m: m.forward_intermediates(X, indices=6), "the last 6 feature levels"),
        ("resnet18", lambda m: m.forward_intermediates(X, output_fmt="NHWC"), "output_fmt"),
    ],
)
def test_bad_arguments_are_named(name, call, match):
    with pytest.raises(ValueError, match=match):
        call(zoo.create_model(name))
