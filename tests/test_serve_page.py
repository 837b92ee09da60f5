"""The page at ``/`` in a real browser (Debian's chromium through Playwright): a Fashion-MNIST
test image picked in the image model's box shows the top class that ``zoo predict`` prints,
and a prompt typed in the LM's box streams to completion. Saves a screenshot in the test's
tmp dir."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import fashion_mnist_pngs, running

import zoo.serve
from zoo.cli.commands import run_predict

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
IMAGES, TEXT = "resnet20.fmnist", "moe_lm.stdlib"

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (make data)")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(zoo.serve.app(IMAGES, TEXT)) as url:
        yield url


def _zoo_predict_top(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    run_predict(
        argparse.Namespace(
            name=IMAGES, images=[str(path)], top_k=1, batch_size=1, device="cpu", optimize=None, no_progress=False
        )
    )
    line = capsys.readouterr().out.splitlines()[1]  # "  99.84%  Ankle boot (9)"
    return line.split("%", 1)[1].rsplit(" (", 1)[0].strip()


def test_the_page_classifies_an_image_and_streams_a_completion(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from playwright.sync_api import expect, sync_playwright

    paths, _ = fashion_mnist_pngs(tmp_path, 2)
    expected = _zoo_predict_top(paths[1], capsys)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server + "/")
        images = page.locator(f'section[data-model="{IMAGES}"]')
        expect(images.locator("table.metrics")).to_contain_text("93.89")
        images.locator('input[type="file"]').set_input_files(str(paths[1]))
        result = images.locator(".result[data-top]")
        expect(result).to_have_attribute("data-top", expected, timeout=20_000)
        expect(result.locator("ol.bars li")).to_have_count(5)
        text = page.locator(f'section[data-model="{TEXT}"]')
        text.locator("textarea").fill("import os\n")
        text.locator("input[type=number]").first.fill("48")
        text.locator("button").click()
        expect(text.locator('.stream-status[data-state="done"]')).to_be_visible(timeout=30_000)
        output = text.locator("pre.output").inner_text()
        page.screenshot(path=str(tmp_path / "zoo-serve-page.png"), full_page=True)
        browser.close()
    assert output.startswith("import os\n") and len(output) > len("import os\n") + 10
    assert not errors, errors
    assert (tmp_path / "zoo-serve-page.png").stat().st_size > 10_000
