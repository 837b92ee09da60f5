"""docs/layout.md's figures are measured, not typed: the walk of a warm ``zoo.load`` (the named
functions of zoo's own package entered before the first line of model code) is counted again by
`benchmarks/load_walk.py`'s tracer and must be what the page says."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import zoo

ROOT = Path(__file__).resolve().parent.parent


def test_the_load_walk_figure_on_the_layout_page_is_measured() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from load_walk import walk
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stays = walk(lambda: zoo.load("resnet20.fmnist"), str(ROOT / "zoo"), (str(ROOT / "architectures"),))
    page = (ROOT / "docs" / "layout.md").read_text()
    stated = int(re.search(r'\| `zoo\.load\("resnet20\.fmnist"\)` \| (\d+)', page).group(1))  # type: ignore[union-attr]
    assert len(stays) == stated, f"docs/layout.md says {stated} stays; the walk has {len(stays)}: {stays}"
    named = re.search(r"zoo's \w+ \(`tests/test_layout.py` counts them again\): (.*?)\. timm's", page, re.DOTALL)
    assert named is not None
    for stay in stays:
        assert f"`{stay.rsplit(':', 1)[1]}`" in named.group(1), f"{stay} is not named on the page"
