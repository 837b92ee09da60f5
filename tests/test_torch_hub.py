"""hubconf.py: torch.hub lists, documents and loads every zoo architecture, from a checkout
whether or not zoo is installed, offline (the bundled weights)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo

ROOT = Path(__file__).resolve().parent.parent
REPO = "zoo-owner/zoo:main"  # torch.hub's GitHub form, served from its cache folder (no network)


@pytest.fixture
def github_cache() -> str:
    """This checkout as torch.hub's cached download of REPO (``<hub dir>/zoo-owner_zoo_main``):
    torch.hub.list and torch.hub.help take GitHub repositories only."""
    hub_dir = Path(torch.hub.get_dir())
    hub_dir.mkdir(parents=True)
    (hub_dir / "zoo-owner_zoo_main").symlink_to(ROOT, target_is_directory=True)
    return REPO


def test_list_has_one_entry_point_per_architecture(github_cache):
    assert torch.hub.list(github_cache, trust_repo=True, verbose=False) == zoo.list_models()


def test_help_describes_the_architecture_and_its_weights(github_cache):
    text = torch.hub.help(github_cache, "resnet50", trust_repo=True)
    assert text.startswith(zoo.store.weight_entries.get_builder("resnet50").__doc__.strip())
    assert "pretrained=True loads resnet50.tv2_in1k" in text
    assert "IMAGENET1K_V1 (resnet50.tv_in1k), IMAGENET1K_V2 (resnet50.tv2_in1k), DEFAULT" in text
    assert "No pretrained weights yet" in torch.hub.help(github_cache, "mobilenet_v1", trust_repo=True)


def test_load_local_gives_what_zoo_load_gives():
    model = torch.hub.load(str(ROOT), "resnet20", source="local", pretrained=True)
    reference = zoo.load("resnet20")
    assert model.pretrained_cfg == reference.pretrained_cfg
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    fresh = torch.hub.load(str(ROOT), "resnet20", source="local", in_chans=3, num_classes=7)
    assert fresh.pretrained_cfg["weights"] is None and fresh.num_classes == 7
    named = torch.hub.load(str(ROOT), "resnet20", source="local", weights="DEFAULT")
    assert named.pretrained_cfg["weights"] == "resnet20.fmnist"


def test_an_entry_without_weights_says_so():
    with pytest.raises(zoo.UnknownModelError, match=r"'mobilenet_v1' has no pretrained weights yet"):
        torch.hub.load(str(ROOT), "mobilenet_v1", source="local", pretrained=True)


_WITHOUT_ZOO_INSTALLED = """
import importlib.util, json, sys
sys.meta_path = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
assert importlib.util.find_spec("zoo") is None, "zoo is still importable: the test would prove nothing"
import torch
from safetensors.torch import load_file
root, repo = sys.argv[1], sys.argv[2]
names = torch.hub.list(repo, trust_repo=True, verbose=False)
model = torch.hub.load(root, "resnet20", source="local", pretrained=True)
bundled = load_file(f"{root}/weights/resnet20.fmnist.safetensors")
import zoo, zoo.training.loop.trainer
print(json.dumps({
    "names": names,
    "help": torch.hub.help(repo, "resnet20", trust_repo=True),
    "weights": model.pretrained_cfg["weights"],
    "equal": all(torch.equal(model.state_dict()[k], v) for k, v in bundled.items()),
    "zoo": zoo.__file__, "architectures": type(model).__module__, "training": zoo.training.loop.trainer.__file__,
}))
"""


def test_a_checkout_works_without_installing_zoo(github_cache, tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ZOO_INSTALLED, str(ROOT), github_cache],
        cwd=tmp_path,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    found = json.loads(child.stdout.splitlines()[-1])
    assert found["names"] == zoo.list_models()
    assert "FMNIST (resnet20.fmnist)" in found["help"]
    assert found["weights"] == "resnet20.fmnist" and found["equal"]
    assert found["zoo"] == str(ROOT / "zoo" / "__init__.py")
    assert found["architectures"] == "zoo.architectures.resnet"
    assert found["training"] == str(ROOT / "training" / "loop" / "trainer.py")


def test_a_missing_dependency_is_named_with_the_fix(monkeypatch):
    monkeypatch.delitem(sys.modules, "zoo")  # as in a fresh process: hubconf checks before importing zoo
    monkeypatch.setitem(sys.modules, "torch_geometric", None)  # find_spec then reports it absent
    meta_path = list(sys.meta_path)
    with pytest.raises(ImportError, match=rf"need torch_geometric, which this Python lacks: .*pip install {ROOT}"):
        torch.hub.load(str(ROOT), "resnet20", source="local")
    assert sys.meta_path == meta_path
