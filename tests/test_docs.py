"""The documentation: `mkdocs build --strict` passes (any warning fails it), and every Python
block of README.md and docs/**/*.md runs as written.

The blocks of one page run in order in one namespace (a later block may use an earlier one's
names), offline (ZOO_OFFLINE=1, HF_HUB_OFFLINE=1), in an empty folder with an empty ZOO_HOME.
A comment on the line just above a block changes how it runs, and nothing else does:

- ``<!-- docs-test: skip: REASON -->``: the block is shown but not run (it needs what a test
  machine does not have: published ImageNet weights, a download, minutes of compiling); the
  reason is required.
- ``<!-- docs-test: fixture: NAME -->``: `FIXTURES` [NAME] prepares the block's world first
  (``hub-resnet18``: a Hugging Face cache holding ``timm/resnet18.a1_in1k``, laid out offline
  from timm's architecture with random weights).

``"path/to/zoo"`` in a block stands for this checkout.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 150

MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<directive>.*?)\s*-->", re.MULTILINE)  # at a line's start
BLOCK = re.compile(
    r"^(?:<!--\s*docs-test:\s*(?P<directive>.*?)\s*-->\n)?```python[ \t]*\n(?P<code>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass
class Block:
    page: Path
    line: int  # the line of the block's first line of code, 1-based
    code: str
    skip: str | None = None  # the reason
    fixture: str | None = None


def python_blocks(page: Path) -> list[Block]:
    """The page's ```python blocks with their markers; a marker that is malformed or not on
    the line just above a Python block is an error, so none is ignored silently."""
    text = page.read_text()
    blocks: list[Block] = []
    attached = 0
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        block = Block(page, line, match.group("code"))
        directive = match.group("directive")
        if directive is not None:
            attached += 1
            kind, _, argument = directive.partition(":")
            kind, argument = kind.strip(), argument.strip()
            if kind == "skip" and argument:
                block.skip = argument
            elif kind == "fixture" and argument in FIXTURES:
                block.fixture = argument
            else:
                raise AssertionError(
                    f"{page.name}:{line}: unknown docs-test marker {directive!r}: "
                    f"write 'skip: REASON' or 'fixture: NAME' (one of {sorted(FIXTURES)})"
                )
        blocks.append(block)
    markers = len(MARKER.findall(text))
    assert markers == attached, f"{page.name}: a docs-test marker is not on the line just above a ```python block"
    return blocks


# --- fixtures: what a block needs that a test machine lacks ------------------------------------


def hub_resnet18(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: dict[str, Any]) -> None:
    """``timm/resnet18.a1_in1k`` in a Hugging Face cache, offline: timm's resnet18 with random
    weights, saved as the Hub repository and laid out as huggingface_hub caches it."""
    import timm
    from timm.models._hub import save_for_hf

    from tests.test_hf_hub import lay_out_snapshot

    torch.manual_seed(0)
    published = timm.create_model("resnet18").eval()
    save_for_hf(published, str(tmp_path / "repo"), safe_serialization=True)
    lay_out_snapshot(tmp_path / "hf", "timm/resnet18.a1_in1k", "a" * 40, tmp_path / "repo")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    state["published"] = published


FIXTURES: dict[str, Callable[[Path, pytest.MonkeyPatch, dict[str, Any]], None]] = {
    "hub-resnet18": hub_resnet18,
}


# --- what a page's blocks must have computed, beyond running -----------------------------------


def check_coming_from(names: dict[str, Any], state: dict[str, Any]) -> None:
    """The timm / torchvision / Hugging Face / torch.hub lines mean what they mean there."""
    import zoo

    assert [m.shape[1] for m in names["maps"]] == [256, 512] and names["final"].shape[1] == 512
    assert names["config"]["input_size"] == (1, 28, 28)
    assert names["preprocess"](torch.rand(1, 40, 30)).shape == (1, 28, 28)
    hub_model = zoo.load("hf-hub:timm/resnet18.a1_in1k")  # the block's Hugging Face line, checked against timm
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(hub_model(x), state["published"](x), rtol=1e-4, atol=1e-5)
    assert names["model"].pretrained_cfg["architecture"] == "resnet20"  # torch.hub's, with the bundled weights
    torch.testing.assert_close(names["model"].state_dict(), zoo.load("resnet20.fmnist").state_dict())


def check_quickstart(names: dict[str, Any], state: dict[str, Any]) -> None:
    assert names["logits"].shape == (1, 10)
    assert names["restored"].num_classes == 7


CHECKS: dict[str, list[Callable[[dict[str, Any], dict[str, Any]], None]]] = {
    "README.md": [check_quickstart, check_coming_from],
    "docs/index.md": [check_quickstart],
    "docs/loading.md": [check_coming_from],
}


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


RUNNABLE = [page for page in PAGES if any(b.skip is None for b in python_blocks(page))]


@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_the_python_blocks_of_a_page_run_in_order(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    environ = dict(os.environ)
    names: dict[str, Any] = {"__name__": "__docs__"}
    state: dict[str, Any] = {}
    try:
        for block in python_blocks(page):
            if block.skip is not None:
                continue
            if block.fixture is not None:
                FIXTURES[block.fixture](tmp_path, monkeypatch, state)
            # blank lines first: tracebacks name the page's own line numbers
            code = "\n" * (block.line - 1) + block.code.replace('"path/to/zoo"', repr(str(ROOT)))
            torch.manual_seed(0)
            exec(compile(code, str(page), "exec"), names)  # noqa: S102 - running the docs is the test
        for check in CHECKS.get(page_id(page), []):
            check(names, state)
    finally:
        os.environ.clear()  # a block may set variables (ZOO_OFFLINE); monkeypatch then undoes its own
        os.environ.update(environ)


def test_every_docs_test_marker_is_known_and_skips_say_why() -> None:
    blocks = [block for page in PAGES for block in python_blocks(page)]
    assert blocks, "no Python blocks found"
    for block in blocks:
        assert block.skip is None or len(block.skip) > 10, f"{block.page.name}:{block.line}: say why it is skipped"
    assert sum(block.skip is None for block in blocks) > sum(block.skip is not None for block in blocks)


def test_mkdocs_builds_the_site_with_no_warning(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output and "ERROR" not in output, output
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("zoo.loading.build.load", "zoo.architectures.register_model", "zoo.errors.ZooError"):
        assert f'id="{name}"' in api, f"the API reference lacks {name}"
    results = (tmp_path / "site" / "results" / "index.html").read_text()
    assert "<!-- csv:" not in results and "resnet20.fmnist" in results


def test_results_csv_files_are_zoo_bench_tables_shown_on_the_results_page() -> None:
    from zoo.deploy.bench import BenchRow

    columns = [field.name for field in dataclasses.fields(BenchRow)]
    files = sorted((ROOT / "results").glob("*.csv"))
    assert files
    results_page = (ROOT / "docs" / "results.md").read_text()
    for path in files:
        with path.open(newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
        assert reader.fieldnames == columns, f"{path.name}: not zoo bench --csv's columns"
        assert rows and all(row["model"] and row["infer_samples_per_sec"] for row in rows), path.name
        assert f"<!-- csv: results/{path.name} -->" in results_page, f"{path.name} is not on docs/results.md"
    for path in sorted((ROOT / "results").glob("*/*.csv")):  # other benchmarks' tables, one folder each
        name = path.relative_to(ROOT).as_posix()
        assert f"<!-- csv: {name} -->" in results_page, f"{name} is not on docs/results.md"
        assert (ROOT / "benchmarks" / f"{path.parent.name}.py").is_file(), (
            f"{name}: no benchmarks/{path.parent.name}.py"
        )


def test_the_readme_is_the_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for command in ("make demo", "make test"):
        assert command in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), f"README links to {link}, which is not there"
