"""The weight entries are data copied from their publishers: check them against the source."""

from __future__ import annotations

import pytest
import torch
import torchvision.models as tvm
from PIL import Image
from torchvision.models._meta import _IMAGENET_CATEGORIES

import zoo

TAGS = {"IMAGENET1K_V1": "tv_in1k", "IMAGENET1K_V2": "tv2_in1k"}
ARCHS = [
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "wide_resnet50_2",
    "densenet121",
    "densenet161",
    "densenet169",
    "densenet201",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
]
PUBLISHED = [(f"{arch}.{TAGS[w.name]}", w) for arch in ARCHS for w in tvm.get_model_weights(arch)]


@pytest.mark.parametrize("name,weights", PUBLISHED, ids=[n for n, _ in PUBLISHED])
def test_entry_matches_torchvision_metadata(name, weights):
    info = zoo.info(name)
    assert info.url == weights.url
    assert weights.url.endswith(f"-{info.sha256}.pth")
    # torchvision's 2017 DenseNet files carry the old `norm.1` keys.
    assert info.converter == ("torchvision_densenet" if name.startswith("densenet") else "identity")
    assert info.num_params == weights.meta["num_params"]
    assert info.metrics["imagenet-1k"] == {
        "top1": weights.meta["_metrics"]["ImageNet-1K"]["acc@1"],
        "top5": weights.meta["_metrics"]["ImageNet-1K"]["acc@5"],
    }
    # torchvision's "GFLOPS" (`_ops`) counts multiply-accumulates.
    assert info.gmacs == pytest.approx(weights.meta["_ops"], rel=0.01)
    assert info.file_size == round(weights.meta["_file_size"] * 1024 * 1024)
    transform = weights.transforms()
    assert info.preprocess == {
        "resize": transform.resize_size[0],
        "crop": transform.crop_size[0],
        "interpolation": transform.interpolation.value,
        "mean": transform.mean,
        "std": transform.std,
    }
    assert info.category_names() == list(_IMAGENET_CATEGORIES)
    assert info.default == (weights is type(weights).DEFAULT)


def test_every_torchvision_entry_is_checked():
    torchvision_entries = {
        name
        for name in zoo.list_models(pretrained=True)
        if (zoo.info(name).url or "").startswith("https://download.pytorch.org/")
    }
    assert torchvision_entries == {name for name, _ in PUBLISHED}


@pytest.mark.parametrize("name,weights", PUBLISHED[2:4], ids=[n for n, _ in PUBLISHED[2:4]])
def test_transforms_equal_torchvision(name, weights):
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (300, 400, 3), dtype=torch.uint8, generator=generator)
    image = Image.fromarray(pixels.numpy())
    ours, theirs = zoo.transforms(name), weights.transforms()
    assert torch.allclose(ours(image), theirs(image), atol=1e-6)
    # uint8 tensors: torchvision v1 and v2 resize round differently, by at most one pixel level.
    chw = pixels.permute(2, 0, 1)
    one_level = 1 / 255 / min(zoo.info(name).preprocess["std"])
    assert (ours(chw) - theirs(chw)).abs().max() <= one_level + 1e-6


def test_default_weights_are_torchvision_default():
    assert zoo.info("resnet50").name == "resnet50.tv2_in1k"
    assert zoo.info("resnet18").name == "resnet18.tv_in1k"


def test_recipes_publish_into_the_repositorys_weights_folder() -> None:
    """What a recipe publishes lands beside the bundled weights, not inside training/."""
    from pathlib import Path

    from zoo.training.recipes.publish import WEIGHTS_DIR

    assert WEIGHTS_DIR == Path(__file__).resolve().parents[1] / "weights"
    assert (WEIGHTS_DIR / "resnet20.fmnist.safetensors").is_file()
