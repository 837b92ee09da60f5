"""A command's ``--out`` is written only on success, atomically, and never onto what it reads
(issue 62's rule, hardening round 5): every command's ``--out`` naming its input, a file of the
run folder it reads or a listed image, by any path, is refused with nothing written; a ``zoo
predict`` or ``zoo export`` that fails leaves an existing ``--out`` as it was."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import zoo
from zoo.cli import main
from zoo.deploy.exporter import ExportMismatchError
from zoo.training.finetune import FinetuneOptions, finetune_with_config
from zoo.training.loop.train_config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def run(tmp_path: Path, pngs: Path) -> Path:
    config = TrainConfig(max_steps=1, batch_size=4, progress=False, tensorboard=False, precision="fp32", num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture; classes too small for the hold-out
        return finetune_with_config(
            "resnet20", pngs, tmp_path / "run", FinetuneOptions(post_training=False), config=config
        ).out


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


# Every command that writes an --out file (predict, eval, export, bench), and zoo shards (its --out a
# new or empty folder), with an --out that names: (a) its input, (b) a file of the run folder it reads,
# (c) a listed image. zoo finetune, tune and demo write a folder of their own (refused when it holds
# other files: run_folder.prepare, tune's _check_out), never an --out file: not walked here.
WALK = [
    ("predict", "its input"),
    ("predict", "a run file"),
    ("predict", "a listed image"),
    ("eval", "its input"),
    ("eval", "a run file"),
    ("eval", "a listed image"),
    ("export", "its input"),  # the run folder's weights
    ("export", "a run file"),  # (c) does not apply: export reads no images
    ("bench", "its input"),  # cached weights; (b), (c) do not apply: bench reads registered names only
    ("shards", "its input"),
    ("shards", "a listed image"),  # (b) does not apply: shards reads data, no run folder
]
SPELLINGS = ("as named", "through ..", "through a symlink", "through a hard link")


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A run folder of a tiny model (the bundled resnet20.fmnist: 28 px gray images, its preprocessing)."""
    return zoo.save(zoo.load("resnet20.fmnist"), tmp_path / "saved")


def command_line(command: str, case: str, saved: Path, listing: Path, zoo_home: Path) -> tuple[list[str], Path]:
    """The command line, less its --out, and the file that --out names."""
    target = {"a run file": saved / "config.json", "a listed image": listing.parent / "pngs" / "b" / "0.png"}.get(case)
    if command == "predict":
        return ["predict", str(saved), "--input", str(listing)], target or listing
    if command == "eval":
        return ["eval", str(saved), "--data", str(listing)], target or listing
    if command == "export":
        argv = ["export", str(saved), "--format", "torchscript", "--overwrite"]  # --overwrite: refused all the same
        return argv, target or saved / "model.safetensors"
    if command == "bench":
        cached = zoo_home / "downloads" / "resnet20-0123abcd.safetensors"  # a weight file in zoo's cache
        cached.parent.mkdir(parents=True)
        cached.write_bytes(b"cached weights")
        return ["bench", "resnet20", "--repeats", "1", "--no-optimize"], cached
    return ["shards", str(listing)], target or listing


def spelled(target: Path, spelling: str, elsewhere: Path) -> Path:
    """``target`` by another path: through a folder and back, a symbolic link, a hard link."""
    elsewhere.mkdir(exist_ok=True)
    if spelling == "through ..":
        return target.parent / ".." / target.parent.name / target.name
    if spelling == "through a symlink":
        (elsewhere / f"link{target.suffix}").symlink_to(target)
        return elsewhere / f"link{target.suffix}"
    if spelling == "through a hard link":
        os.link(target, elsewhere / f"hard{target.suffix}")
        return elsewhere / f"hard{target.suffix}"
    return target


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(("command", "case"), WALK)
def test_every_out_naming_what_the_command_reads_is_refused(
    command, case, spelling, saved, pngs, tmp_path, zoo_home, capsys
) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("file_name,label\npngs/a/0.png,Trouser\npngs/b/0.png,Bag\n")  # classes the run knows
    argv, target = command_line(command, case, saved, listing, zoo_home)
    out = spelled(target, spelling, tmp_path / "elsewhere")
    roots = (saved, pngs, listing, zoo_home, tmp_path / "elsewhere")
    before = snapshot(*[root for root in roots if root.exists()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--out {out}" in err, err
    assert "is an input of this command" in err or "is not an empty folder" in err, err  # shards: a file
    assert snapshot(*[root for root in roots if root.exists()]) == before


def test_a_failed_export_leaves_an_existing_out_as_it_was(tmp_path: Path) -> None:
    """The export is written and checked aside, and put in place only when the check passes."""

    class FixedBatch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[0] == 2 else x  # traced at batch 2: wrong at any other

    out = tmp_path / "m.pt"
    out.write_bytes(b"yesterday's export")
    with pytest.raises(ExportMismatchError, match="depends on the batch size"):
        zoo.export(FixedBatch(), out, "torchscript", example_input=torch.randn(2, 3), overwrite=True)
    assert out.read_bytes() == b"yesterday's export" and [p.name for p in tmp_path.iterdir()] == ["m.pt"]
