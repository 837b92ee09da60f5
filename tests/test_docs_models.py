"""The Models page (docs/models.md, its table written by docs_hooks/models_table.py at build
time): one row per weight entry, figures counted from the architectures, and the ImageNet
entries' published top-1 / top-5. tests/test_docs.py builds the whole site with the hook."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import zoo

ROOT = Path(__file__).resolve().parent.parent


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("models_table", ROOT / "docs_hooks" / "models_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    return load_hook()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The table's cache, empty until `rows` counts the figures afresh into it."""
    return tmp_path_factory.mktemp("cache") / "models_table.json"


@pytest.fixture(scope="module")
def rows(hook: ModuleType, cache: Path) -> dict[str, dict[str, str]]:
    """The tables' rows by weight name, each {heading: cell, "section": its heading}, counted
    afresh (an empty cache)."""
    lines = hook.models_table(cache).splitlines()
    table = {}
    section = ""
    for at, line in enumerate(lines):  # each section's table: its headings, the rule, its rows
        section = line.removeprefix("## ") if line.startswith("## ") else section
        if line.startswith("|") and at + 1 < len(lines) and lines[at + 1].startswith("|---"):
            headings = [cell.strip() for cell in line.strip("|").split("|")]
            assert headings[: len(hook.HEADINGS)] == list(hook.HEADINGS)
            assert headings[-len(hook.FIGURES) :] == list(hook.FIGURES)
            continue
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = dict(zip(headings, (cell.strip() for cell in line.strip("|").split("|"))))
        name = re.search(r"<code[^>]*>([^<]+)</code>", cells["weights"]).group(1)
        assert name not in table, f"{name} has two rows"
        table[name] = {**cells, "section": section}
    return table


def test_the_catalogue_is_grouped_by_data_set_then_family_with_one_precision_a_column(
    hook: ModuleType, rows: dict[str, dict[str, str]], cache: Path
) -> None:
    page = hook.models_table(None)
    sections = re.findall(r"^## (.+)$", page, re.MULTILINE)
    assert sections[:3] == ["ImageNet-1K", "Fashion-MNIST", "Digits (scikit-learn, nudged)"]
    assert sections[-1] == "About the figures" and len(sections) == len(set(sections))
    imagenet = [name for name, row in rows.items() if row["section"] == "ImageNet-1K"]
    families = [rows[name]["family"] for name in imagenet]
    assert families == sorted(families) and "data set" not in rows["resnet50.tv_in1k"]  # one data set: no column
    assert imagenet.index("resnet18.tv_in1k") < imagenet.index("resnet50.tv2_in1k") < imagenet.index("resnet50.tv_in1k")
    assert imagenet.index("resnet50.tv_in1k") < imagenet.index("resnet101.tv2_in1k")  # numbers as numbers
    for name in imagenet:  # percent to 2 decimals, every one
        assert re.fullmatch(r"\d+\.\d\d", rows[name]["top-1 (%)"]) and re.fullmatch(
            r"\d+\.\d\d", rows[name]["top-5 (%)"]
        )
    assert all(re.fullmatch(r"\d+\.\d\d|–", row["file (MiB)"]) for row in rows.values())
    assert 'white-space: nowrap">wide_resnet50_2.tv2_in1k</code>' in rows["wide_resnet50_2.tv2_in1k"]["weights"]
    assert hook.models_table(cache) == page  # a stable order, and the cached figures are the counted ones


def test_the_table_has_one_row_per_weight_entry(rows: dict[str, dict[str, str]]) -> None:
    names = zoo.list_models(pretrained=True)
    assert len(rows) == len(names) and set(rows) == set(names)


def test_the_figures_of_resnet20_fmnist_are_counted_from_its_architecture(rows: dict[str, dict[str, str]]) -> None:
    info = zoo.info("resnet20.fmnist")
    model = zoo.load("resnet20", pretrained=False, num_classes=info.num_classes, **info.model_kwargs)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 1, 28, 28))  # its preprocessing: 1 channel, 28 px
    row = rows["resnet20.fmnist"]
    assert int(row["params"].replace(",", "")) == sum(p.numel() for p in model.parameters()) == 269434
    assert float(row["GMACs"]) == pytest.approx(counter.get_total_flops() / 2 / 1e9, rel=1e-3)
    size = (ROOT / "weights" / "resnet20.fmnist.safetensors").stat().st_size
    assert float(row["file (MiB)"]) == pytest.approx(size / 2**20, abs=0.05)
    assert (row["section"], row["data set"]) == (
        "Fashion-MNIST",
        '<code style="white-space: nowrap">fashion-mnist</code>',
    )
    assert (row["family"], row["top-1 (%)"], row["loss"]) == ("ResNet", "93.89", "0.1680")
    assert (row["source"], row["licence"]) == ("bundled", '<span style="white-space: nowrap">Apache-2.0</span>')


def test_published_entries_show_their_host_and_imagenet_figures(rows: dict[str, dict[str, str]]) -> None:
    row = rows["resnet50.tv_in1k"]
    assert (row["top-1 (%)"], row["top-5 (%)"], row["source"]) == ("76.13", "92.86", "download.pytorch.org")
    row = rows["seresnet50.a1_in1k"]
    assert (row["top-1 (%)"], row["top-5 (%)"], row["file (MiB)"]) == ("81.10", "95.12", "–")
    assert "huggingface.co/timm/seresnet50.a1_in1k" in row["source"]
    assert rows["gin3.triangles_er"]["GMACs"] == "–" and rows["gin3.triangles_er"]["NMSE"] == "5.3e-11"


def test_counted_figures_agree_with_what_the_entries_record(rows: dict[str, dict[str, str]]) -> None:
    for name, row in rows.items():
        info = zoo.info(name)
        assert int(row["params"].replace(",", "")) == info.num_params, name
        if info.gmacs is None:
            assert row["GMACs"] == "–", name
        else:
            assert float(row["GMACs"]) == pytest.approx(info.gmacs, rel=1e-3), name


def test_the_hook_fills_the_models_page_and_uses_its_cache(hook: ModuleType, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "models.md").read_text()
    assert hook.MARKER.search(page)
    cache = tmp_path / "figures.json"
    first = hook.figures(["resnet20.fmnist"], cache)
    assert cache.is_file()
    cache.write_text(cache.read_text().replace("269434", "7"))  # a cached figure is used as it is
    assert hook.figures(["resnet20.fmnist"], cache)["resnet20.fmnist"][0] == 7 != first["resnet20.fmnist"][0]


def test_every_imagenet_entry_carries_top1_and_top5() -> None:
    imagenet = [name for name in zoo.list_models(pretrained=True) if zoo.info(name).categories == "imagenet"]
    assert len(imagenet) >= 20 and "seresnet50.a1_in1k" in imagenet
    for name in imagenet:
        metrics = zoo.info(name).metrics
        assert set(metrics) == {"imagenet-1k"}, f"{name}: {sorted(metrics)}"
        assert set(metrics["imagenet-1k"]) == {"top1", "top5"}, name
        top1, top5 = metrics["imagenet-1k"]["top1"], metrics["imagenet-1k"]["top5"]
        assert 50 < top1 < top5 < 100, name


def test_seresnet50_a1_in1k_carries_timms_published_figures() -> None:
    # timm's results/results-imagenet.csv: seresnet50.a1_in1k,81.102,18.898,95.120,4.880,28.09,288,1.000,bicubic
    assert zoo.info("seresnet50.a1_in1k").metrics == {"imagenet-1k": {"top1": 81.102, "top5": 95.12}}


def test_install_and_models_follow_home_in_the_nav() -> None:
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert nav[:3] == [{"Home": "index.md"}, {"Install": "install.md"}, {"Models": "models.md"}]
    assert "docs_hooks/models_table.py" in yaml.safe_load((ROOT / "mkdocs.yml").read_text())["hooks"]
