"""A command's ``--out`` is written only on success, atomically, and never onto what it reads
(issue 62's rule): ``zoo eval --out`` naming its data or a file of the run folder, ``zoo predict
--out`` naming a listed image, are refused with nothing written; a ``zoo predict`` that fails
leaves an existing ``--out`` as it was."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.training.finetune import FinetuneOptions, finetune
from zoo.training.loop.train_config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def run(tmp_path: Path, pngs: Path) -> Path:
    config = TrainConfig(max_steps=1, batch_size=4, progress=False, tensorboard=False, precision="fp32", num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture; classes too small for the hold-out
        return finetune("resnet20", pngs, tmp_path / "run", FinetuneOptions(post_training=False), config=config).out


def snapshot(*roots: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for root in roots for p in ([root] if root.is_file() else sorted(root.rglob("*")))
            if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("target", ["the run's config.json", "a listed image", "the image list"])
def test_eval_refuses_an_out_it_reads_and_writes_nothing(run, pngs, tmp_path, capsys, target) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("file_name,label\npngs/a/0.png,a\npngs/b/0.png,b\n")
    out = {"the run's config.json": run / "config.json", "a listed image": pngs / "a" / "0.png"}.get(target, listing)
    data = listing if target == "the image list" else pngs
    before = snapshot(run, pngs, listing)
    assert main(["eval", str(run), "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is an input of this command" in err and str(out) in err
    assert snapshot(run, pngs, listing) == before
    assert main(["eval", str(run), "--data", str(pngs), "--out", str(tmp_path / "scores.json")]) == 0
    assert '"accuracy"' in (tmp_path / "scores.json").read_text()


def test_predict_refuses_an_out_that_is_a_listed_image(run, pngs, tmp_path, capsys) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("file_name\npngs/a/0.png\npngs/b/1.png\n")
    before = snapshot(pngs, listing)
    assert main(["predict", str(run), "--input", str(listing), "--out", str(pngs / "b" / "1.png")]) == 2
    assert "is an input of this command" in capsys.readouterr().err
    assert snapshot(pngs, listing) == before


def test_a_failed_predict_leaves_an_existing_out_as_it_was(run, tmp_path, capsys) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("file_name\nmissing/one.png\nmissing/two.png\n")
    out = tmp_path / "predictions.csv"
    out.write_text("yesterday's predictions\n")
    assert main(["predict", str(run), "--input", str(listing), "--out", str(out)]) == 2
    assert "none of its 2 rows could be predicted" in capsys.readouterr().err
    assert out.read_text() == "yesterday's predictions\n" and [p.name for p in tmp_path.glob(".*part")] == []


def test_a_format_the_out_suffix_contradicts_is_refused(run, tmp_path, capsys) -> None:
    """Issue 62: ``--format csv --out x.jsonl`` wrote CSV into the .jsonl file."""
    listing = tmp_path / "list.csv"
    listing.write_text("file_name\npngs/a/0.png\n")
    out = tmp_path / "x.jsonl"
    assert main(["predict", str(run), "--input", str(listing), "--format", "csv", "--out", str(out)]) == 2
    assert "--format csv and --out" in capsys.readouterr().err and not out.exists()
