"""The README's 'Coming from timm, torchvision, Hugging Face or torch.hub' block runs as written,
offline: its Hub repository is laid out in a Hugging Face cache, its torch.hub path is this checkout."""
from __future__ import annotations

import re
from pathlib import Path

import timm
import torch
from timm.models._hub import save_for_hf

import zoo
from tests.test_hf_hub import lay_out_snapshot

ROOT = Path(__file__).resolve().parent.parent


def habits_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Coming from timm, torchvision, Hugging Face or torch.hub", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_lines_of_timm_torchvision_hugging_face_and_torch_hub_users_run(tmp_path, monkeypatch):
    torch.manual_seed(0)
    published = timm.create_model("resnet18").eval()
    save_for_hf(published, str(tmp_path / "repo"), safe_serialization=True)
    lay_out_snapshot(tmp_path / "hf", "timm/resnet18.a1_in1k", "a" * 40, tmp_path / "repo")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    code = habits_block().replace('"path/to/zoo"', repr(str(ROOT)))
    names: dict = {}
    exec(compile(code, "README.md", "exec"), names)

    assert [m.shape[1] for m in names["maps"]] == [256, 512] and names["final"].shape[1] == 512
    assert names["config"]["input_size"] == (1, 28, 28)
    assert names["preprocess"](torch.rand(1, 40, 30)).shape == (1, 28, 28)
    hub_model = zoo.load("hf-hub:timm/resnet18.a1_in1k")  # the block's Hugging Face line, checked against timm
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(hub_model(x), published(x), rtol=1e-4, atol=1e-5)
    assert names["model"].pretrained_cfg["architecture"] == "resnet20"  # torch.hub's, with the bundled weights
    torch.testing.assert_close(names["model"].state_dict(), zoo.load("resnet20.fmnist").state_dict())
