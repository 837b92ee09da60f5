"""The generic checks of timm's own model tests (its tests/test_models.py: default cfgs, pooling
and classifier removed through ``reset_classifier`` and through ``create_model``, ``pre_logits``,
``forward_intermediates``, ``features_only`` with each ``feature_cls``), written for zoo: on zoo's
small-image models, and on the models timm also builds compared with timm's, on the same weights
where the state dicts are the same."""

from __future__ import annotations

import math

import pytest
import timm
import torch
import torchvision
from published import randomize_batchnorm

import zoo
from zoo.architectures import ARCHS
from zoo.errors import InvalidArgumentError

# zoo's own vision models: timm's generic checks apply to them as to timm's
ZOO_CNNS = [
    "resnet20",
    "seresnet20",
    "densenet_bc_40",
    "mobilenet_v1_cifar",
    "mobilenet_v2_cifar",
    "mobilenet_v3_small_cifar",
]
# timm's names that zoo builds, one per block kind (ResNeXt and the wide ResNet are ResNet-50's code)
TIMM_NAMES = [
    "resnet18",
    "resnet50",
    "seresnet50",
    "densenet121",
    "mobilenetv1_100",
    "mobilenetv2_100",
    "mobilenetv3_large_100",
    "mobilenetv3_small_100",
]
FEATURE_CLASSES = ["getter", "hook", "fx"]
pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread beats spinning pools on a shared machine


def _x(model: torch.nn.Module, size: int | None = None) -> torch.Tensor:
    channels, height, width = model.pretrained_cfg["input_size"]
    shape = (2, channels, size or height, size or width)
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", [*ZOO_CNNS, "resnet18", "mobilenetv3_small_100"])
def test_default_cfgs(name):
    """timm's test_model_default_cfgs: pool_size, num_features and head_hidden_size tell the
    shapes that forward_features, pre_logits and the model without classifier or pooling give."""
    model = zoo.create_model(name).eval()
    cfg = model.default_cfg
    assert cfg is model.pretrained_cfg  # timm's alias
    state_dict = model.state_dict()
    assert f"{cfg['classifier']}.weight" in state_dict and f"{cfg['first_conv']}.weight" in state_dict
    x = _x(model)
    with torch.no_grad():
        features = model.forward_features(x)
        pre_logits = model.forward_head(features, pre_logits=True)
        assert features.shape[1:] == (model.num_features, *cfg["pool_size"])
        assert pre_logits.shape == (2, model.head_hidden_size)
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pre_logits)
        model.reset_classifier(0, "")
        unpooled = model(x)
        assert unpooled.ndim == 4 and unpooled.shape[2:] == cfg["pool_size"]
        headless = zoo.create_model(name, num_classes=0, global_pool="").eval()
        assert headless(x).shape == unpooled.shape and headless.num_classes == 0


@pytest.mark.parametrize("name", [*ZOO_CNNS, "moe_vit"])
def test_forward_intermediates_as_timms_test_reads_them(name):
    """timm's test_model_forward_intermediates: timm's own FeatureInfo over the model's levels,
    one map per level of the stated channels and at most ceil(size / reduction) + 1 wide, the
    final features equal to forward_features, with grad checkpointing too."""
    model = zoo.create_model(name).eval()
    levels = timm.models.FeatureInfo(model.feature_info, len(model.feature_info))
    x = _x(model)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x)
        assert len(maps) == len(levels) >= 3
        for channels, reduction, level in zip(levels.channels(), levels.reduction(), maps, strict=True):
            assert level.shape[:2] == (2, channels)
            assert all(side <= math.ceil(x.shape[-1] / reduction) + 1 for side in level.shape[2:])
        torch.testing.assert_close(final, model.forward_features(x))
        model.set_grad_checkpointing()
        torch.testing.assert_close(model.forward_intermediates(x)[0], final)


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_headless_models_and_pre_logits_equal_timm(name):
    """``num_classes=0, global_pool=""`` and ``pre_logits=True`` give timm's shapes; where timm's
    state dict is zoo's (ResNets, DenseNets) also timm's values."""
    torch.manual_seed(0)
    theirs = randomize_batchnorm(timm.create_model(name, num_classes=0, global_pool="")).eval()
    ours = zoo.create_model(name, num_classes=0, global_pool="").eval()
    same_weights = ARCHS[zoo.peers.timm.TIMM_NAMES.get(name, (name, {}))[0]].timm_checkpoints
    if same_weights:
        ours.load_state_dict(theirs.state_dict())
    assert (ours.num_features, ours.head_hidden_size) == (theirs.num_features, theirs.head_hidden_size)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        maps, expected = ours(x), theirs(x)
        assert maps.shape == expected.shape and maps.ndim == 4
        pre_logits = ours.forward_head(ours.forward_features(x).mean((2, 3), keepdim=True), pre_logits=True)
        assert pre_logits.shape[1] == theirs.head_hidden_size  # timm's MobileNetV3: after its conv_head
        if same_weights:
            torch.testing.assert_close(maps, expected, rtol=1e-4, atol=1e-4)


def test_mobilenet_v3_pre_logits_equal_torchvision_hidden_layer():
    """timm's pre_logits for MobileNetV3 (after conv_head) is torchvision's classifier[:2] output."""
    torch.manual_seed(0)
    reference = randomize_batchnorm(torchvision.models.mobilenet_v3_small()).eval()
    model = zoo.load("mobilenet_v3_small", pretrained=False).eval()
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = reference.classifier[:2](reference.avgpool(reference.features(x)).flatten(1))
        torch.testing.assert_close(model.forward_head(model.forward_features(x), pre_logits=True), expected)
        model.reset_classifier(0)
        torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize("feature_cls", FEATURE_CLASSES)
def test_feature_classes_equal_timms(feature_cls):
    """``features_only=True, feature_cls=...``: timm's feature net of that kind and zoo's give
    the same maps (same weights: timm builds the same random ones under the same seed)."""
    torch.manual_seed(0)
    theirs = timm.create_model("resnet18", features_only=True, feature_cls=feature_cls, out_indices=(0, 2, 4)).eval()
    torch.manual_seed(0)
    reference = timm.create_model("resnet18")
    ours = zoo.create_model("resnet18", features_only=True, feature_cls=feature_cls, out_indices=(0, 2, 4)).eval()
    ours.model.load_state_dict({k: v for k, v in reference.state_dict().items() if not k.startswith("fc.")})
    assert ours.feature_info.channels() == theirs.feature_info.channels()
    assert ours.feature_info.reduction() == theirs.feature_info.reduction()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(ours(x), theirs(x), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.parametrize("name", ["densenet_bc_40", "mobilenet_v2_cifar", "mobilenet_v3_small_cifar"])
def test_feature_classes_agree_and_fx_features_script(name):
    torch.manual_seed(0)
    extractors = {cls: zoo.load(name, pretrained=False, features_only=True, feature_cls=cls) for cls in FEATURE_CLASSES}
    state = extractors["getter"].state_dict()
    for extractor in extractors.values():
        extractor.load_state_dict(state)
    x = _x(extractors["getter"])
    with torch.no_grad(), torch.jit.optimized_execution(False):
        expected = extractors["getter"](x)
        assert len(expected) == len(extractors["getter"].feature_info.channels())
        for cls in ("hook", "fx"):
            for a, b in zip(extractors[cls](x), expected, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0, msg=cls)
        for a, b in zip(torch.jit.script(extractors["fx"])(x), expected, strict=True):  # timm's fx + script check
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: zoo.create_model("moe_vit", features_only=True, feature_cls="hook"),
            "moe_vit's levels are transformer blocks",
        ),
        (
            lambda: zoo.load("moe_vit", pretrained=False, features_only=True, feature_cls="fx"),
            "use feature_cls='getter'",
        ),
        (
            lambda: zoo.create_model("resnet20", features_only=True, feature_cls="dict"),
            r"feature_cls='dict' is not one zoo builds",
        ),
        (lambda: zoo.create_model("resnet20", feature_cls="hook"), r"pass features_only=True"),
        (lambda: zoo.load("resnet20", pretrained=False, feature_cls="fx"), r"pass features_only=True"),
        (
            lambda: zoo.create_model("resnet20", features_only=True, feature_cfg={"flatten_sequential": True}),
            "feature_cfg takes feature_cls and out_indices in zoo, not flatten_sequential",
        ),
        (lambda: zoo.create_model("resnet20", num_classes=3, global_pool=""), r"global_pool='' .*pass num_classes=0"),
        (lambda: zoo.create_model("resnet20").reset_classifier(3, global_pool=""), r"pass num_classes=0"),
        (
            lambda: zoo.create_model("mobilenet_v3_small", global_pool="catavgmax"),
            "cannot take global_pool='catavgmax'",
        ),
        (lambda: zoo.create_model("dbn", num_classes=0, global_pool=""), "dbn takes no option 'global_pool'"),
        (lambda: zoo.create_model("resnet20").forward_intermediates(torch.randn(1, 3, 8, 8), indices=9), "the last 9"),
        (
            lambda: zoo.create_model("resnet20", features_only=True, feature_cls="fx").set_grad_checkpointing(),
            "feature_cls='getter' to checkpoint",
        ),
    ],
)
def test_refused_options_are_zoo_errors_naming_them(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def test_headless_model_saves_and_restores(tmp_path):
    model = zoo.create_model("mobilenet_v2_cifar", num_classes=0, global_pool="").eval()
    zoo.save(model, tmp_path / "headless")
    restored = zoo.load(tmp_path / "headless")
    x = _x(model)
    with torch.no_grad():
        torch.testing.assert_close(restored(x), model(x))
    assert restored(x).ndim == 4 and restored.pretrained_cfg["model_kwargs"]["global_pool"] == ""


def test_moe_vit_getter_features():
    """timm's getter (forward_intermediates) is the one feature_cls a ViT has: moe_vit's block maps."""
    backbone = zoo.create_model("moe_vit", features_only=True, feature_cls="getter", out_indices=2).eval()
    with torch.no_grad():
        maps = backbone(torch.randn(2, 1, 28, 28))
    assert (
        [tuple(m.shape) for m in maps]
        == [(2, 128, 7, 7)] * 2
        == [(2, c, 7, 7) for c in backbone.feature_info.channels()]
    )
