"""Tracers and compilers capture zoo's vision models as they capture timm's and torchvision's
(issue: their own model tests on zoo's models): ``torch.jit.script`` and ``torch.fx`` give eager's
outputs, torchvision's ``create_feature_extractor`` gives torchvision's maps on the same weights,
and the input checks step aside while a model is captured (and add nothing to the graph). Where a
capture cannot apply (moe_vit, moe_lm) the refusal is a ZooError that says why and what to use."""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from published import randomize_batchnorm
from torch.fx import symbolic_trace
from torchvision.models.feature_extraction import create_feature_extractor

import zoo
from zoo.errors import InvalidArgumentError, ZooError

# small models on one thread (the conftest's one_thread: spinning thread pools lose on a shared machine)
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning"),
    pytest.mark.usefixtures("one_thread"),
]


@pytest.fixture(autouse=True)
def _plain_torchscript():
    """Run scripted models without the JIT's profiling and fusion passes (as timm's tests do):
    the same outputs, seconds less per model."""
    with torch.jit.optimized_execution(False):
        yield


# zoo's own small-image CNNs (each family and block kind: SE gates, option-A shortcuts, dense
# blocks, depthwise-separable and inverted residual blocks) and, at full size, the ImageNet layouts
# of the ResNets (projection shortcuts, bottlenecks) and MobileNetV3 (hard-swish, hidden head);
# DenseNet-121 is compared with torchvision below.
SMALL = [
    "resnet20",
    "seresnet20",
    "densenet_bc_40",
    "densenet_bc_40:se",
    "mobilenet_v1_cifar",
    "mobilenet_v2_cifar",
    "mobilenet_v3_small_cifar",
]
FULL = ["resnet50", "mobilenet_v3_large"]


def _model(name: str) -> torch.nn.Module:
    """The architecture ``name`` (``NAME:se`` adds squeeze-excite gates) with random BatchNorm statistics."""
    torch.manual_seed(0)
    arch, _, variant = name.partition(":")
    options = {"se_ratio": 0.25} if variant == "se" else {}
    return randomize_batchnorm(zoo.load(arch, pretrained=False, **options)).eval()


def _input(model: torch.nn.Module, size: int = 32) -> torch.Tensor:
    return torch.randn(2, model.in_chans, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", SMALL + FULL)
def test_script_and_fx_give_eager_outputs(name):
    model = _model(name)
    x = _input(model)
    with torch.no_grad():
        expected = model(x)
        scripted = torch.jit.script(model)
        torch.testing.assert_close(scripted(x), expected, rtol=1e-5, atol=1e-5)
        traced = symbolic_trace(model)
        torch.testing.assert_close(traced(x), expected, rtol=0, atol=0)
        torch.testing.assert_close(torch.jit.script(traced)(x), expected, rtol=1e-5, atol=1e-5)  # timm's fx + script
        features = model.forward_features(x)
        torch.testing.assert_close(scripted.forward_features(x), features, rtol=1e-5, atol=1e-5)
    # the input check added nothing to the graph: the image goes straight into the first conv
    (image,) = [node for node in traced.graph.nodes if node.op == "placeholder"]
    assert [user.target for user in image.users] == [model.first_conv]


@pytest.mark.parametrize("name", ["resnet20", "densenet_bc_40", "mobilenet_v3_small_cifar"])
def test_scripted_features_only_and_headless_models(name):
    x = _input(zoo.load(name, pretrained=False))
    backbone = zoo.load(name, pretrained=False, features_only=True)
    headless = zoo.create_model(name, num_classes=0, global_pool="").eval()
    with torch.no_grad():
        for ours, theirs in zip(torch.jit.script(backbone)(x), backbone(x), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.jit.script(headless)(x), headless(x), rtol=1e-5, atol=1e-5)


def test_scripted_resnet_equals_timms_scripted_resnet():
    torch.manual_seed(0)
    reference = randomize_batchnorm(timm.create_model("resnet18")).eval()
    model = zoo.create_model("resnet18").eval()
    model.load_state_dict(reference.state_dict())
    x = _input(model, 64)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.script(model)(x), torch.jit.script(reference)(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "nodes"),
    [
        ("resnet50", ["relu", "layer1", "layer2", "layer3", "layer4"]),
        ("densenet121", ["features.relu0", "features.denseblock2", "features.transition3", "features.norm5"]),
    ],
)
def test_create_feature_extractor_equals_torchvision(name, nodes):
    """torchvision's FX feature extraction on zoo's model and on torchvision's, same weights."""
    torch.manual_seed(0)
    reference = randomize_batchnorm(getattr(torchvision.models, name)()).eval()
    model = zoo.load(name, pretrained=False).eval()
    model.load_state_dict(reference.state_dict())
    x = _input(model, 64)
    ours = create_feature_extractor(model, return_nodes=nodes)
    theirs = create_feature_extractor(reference, return_nodes=nodes)
    with torch.no_grad():
        got, expected = ours(x), theirs(x)
    assert list(got) == list(expected) == nodes
    for node in nodes:
        torch.testing.assert_close(got[node], expected[node], rtol=1e-4, atol=1e-4, msg=node)


def test_compile_captures_one_graph_and_checks_still_work_in_eager():
    model = _model("resnet20")
    x = _input(model)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    with pytest.raises(ValueError, match=r"resnet20 expects input of shape \(N, 3, H, W\).*in_chans=1"):
        model(torch.randn(2, 1, 32, 32))  # eager still names the problem


@pytest.mark.parametrize(
    ("capture", "match"),
    [
        (torch.jit.script, r"moe_vit cannot be compiled by torch.jit.script: .*custom autograd Function.*torch.export"),
        (symbolic_trace, r"moe_vit cannot be traced by torch.fx .*decided by the data.*forward_intermediates"),
        (lambda m: create_feature_extractor(m, ["layers.0"]), r"moe_vit cannot be traced by torch.fx"),
    ],
)
def test_moe_vit_refuses_captures_that_cannot_apply_by_name(capture, match):
    with pytest.raises(InvalidArgumentError, match=match):
        capture(zoo.load("moe_vit", pretrained=False))


def test_moe_lm_refuses_torchscript_by_name_and_traces():
    model = zoo.load(
        "moe_lm", pretrained=False, num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=2, intermediate_size=32
    )
    with pytest.raises(ZooError, match="moe_lm cannot be compiled by torch.jit.script"):
        torch.jit.script(model)
    ids = torch.randint(0, 256, (2, 5))
    with torch.no_grad():
        traced = torch.jit.trace(model, ids, check_trace=False)  # what the message points to works
        torch.testing.assert_close(traced(ids), model(ids), rtol=1e-4, atol=1e-4)
