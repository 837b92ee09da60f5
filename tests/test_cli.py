"""`zoo list`, `zoo info`, `zoo predict` and `python -m zoo`."""
from __future__ import annotations

import subprocess
import sys

import torch
import torchvision
from PIL import Image

from published import publish, randomize_batchnorm
from zoo.cli import main


def test_list(capsys):
    assert main(["list", "resnet1*"]) == 0
    assert capsys.readouterr().out.split() == ["resnet101", "resnet152", "resnet18"]
    assert main(["list", "resnet50*", "--pretrained"]) == 0
    assert capsys.readouterr().out.split() == ["resnet50.tv2_in1k", "resnet50.tv_in1k"]


def test_info(capsys):
    assert main(["info", "resnet50.tv_in1k"]) == 0
    out = capsys.readouterr().out
    for text in ("25,557,032", "0676ba61", "top1=76.13", "https://download.pytorch.org/models/resnet50-0676ba61.pth"):
        assert text in out


def test_unknown_name_is_a_clear_error(capsys):
    assert main(["info", "resnet5"]) == 2
    assert "Did you mean" in capsys.readouterr().err


def test_predict_prints_top5_with_class_names(http_server, monkeypatch, tmp_path, capsys):
    torch.manual_seed(0)
    reference = randomize_batchnorm(torchvision.models.resnet18()).eval()
    publish(http_server, monkeypatch, "resnet18.tv_in1k", reference.state_dict())
    image_path = tmp_path / "cat.png"
    Image.fromarray(torch.randint(0, 256, (80, 90, 3), dtype=torch.uint8).numpy()).save(image_path)
    assert main(["predict", "resnet18.tv_in1k", str(image_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(image_path) and len(lines) == 6
    transform = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.transforms()
    with torch.no_grad():
        expected = reference(transform(Image.open(image_path).convert("RGB"))[None]).argmax().item()
    expected_name = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"][expected]
    assert lines[1].strip().endswith(f"{expected_name} ({expected})")


def test_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "zoo", "list", "seresnet*"], capture_output=True, text=True)
    assert result.returncode == 0 and "seresnet50" in result.stdout.split()
