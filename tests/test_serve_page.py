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
# How long the page may take for each step (ms): a ceiling, not a wait, generous for a busy machine
# (Playwright's own default for an assertion is 5 s).
PATIENCE_MS = 120_000

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
    """The completion is greedy (temperature 0 typed in the page's box): sampled at the page's
    default (0.8, top_p 0.95, a random seed per request) the model ended the file at once for
    about 1 prompt in 40 (5 of 200 seeds), and the page showed the prompt alone."""
    from playwright.sync_api import expect, sync_playwright

    paths, _ = fashion_mnist_pngs(tmp_path, 2)
    expected = _zoo_predict_top(paths[1], capsys)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=PATIENCE_MS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(PATIENCE_MS)  # goto, fill, click, inner_text
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server + "/")
        images = page.locator(f'section[data-model="{IMAGES}"]')
        expect(images.locator("table.metrics")).to_contain_text("93.89", timeout=PATIENCE_MS)
        images.locator('input[type="file"]').set_input_files(str(paths[1]))
        result = images.locator(".result[data-top]")
        expect(result).to_have_attribute("data-top", expected, timeout=PATIENCE_MS)
        expect(result.locator("ol.bars li")).to_have_count(5, timeout=PATIENCE_MS)
        text = page.locator(f'section[data-model="{TEXT}"]')
        text.locator("textarea").fill("import os\n")
        text.get_by_label("max tokens").fill("48")
        text.get_by_label("temperature").fill("0")  # greedy: the same completion every time
        text.locator("button").click()
        status = text.locator('.stream-status[data-state="done"], .stream-status[data-state="error"]')
        expect(status).to_be_visible(timeout=PATIENCE_MS)  # the stream ended, either way
        ended, said = status.get_attribute("data-state"), status.inner_text()
        output = text.locator("pre.output").inner_text()
        page.screenshot(path=str(tmp_path / "zoo-serve-page.png"), full_page=True)
        browser.close()
    assert ended == "done", said
    assert output.startswith("import os\n") and len(output) > len("import os\n") + 10, (output, said)
    assert not errors, errors
    assert (tmp_path / "zoo-serve-page.png").stat().st_size > 10_000
