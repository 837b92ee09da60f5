"""``--overwrite`` removes exactly the files a run wrote (its manifest, run_files.json, lists
them with their sha256), never a user's file that has a run output's name, never a folder the
run did not create, never through a link; when something in the run's way is not a run's own
it refuses before deleting anything, naming it. The demo's digits and transfer's files too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.errors import DataError, InvalidArgumentError
from zoo.training import demo
from zoo.training.finetune import FinetuneOptions, finetune_with_config
from zoo.training.finetune.run_folder import MANIFEST, Output, prepare
from zoo.training.loop.trainer import TrainConfig

QUIET = dict(progress=False, tensorboard=False, plot=False)
pytestmark = pytest.mark.usefixtures("one_thread")


def run(data: Path, out: Path, overwrite: bool = True, **config) -> None:
    settings = dict(max_steps=1, batch_size=4, out_dir=str(out), **QUIET) | config
    options = FinetuneOptions(post_training=False, overwrite=overwrite)
    finetune_with_config("resnet20", data, out, options, config=TrainConfig(**settings))


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def users_folder(out: Path) -> None:
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "my_model_v3.pt").write_bytes(b"weeks of training")
    (out / "notes.txt").write_text("my notes")


def test_overwrite_refuses_before_deleting_anything_when_a_users_file_is_in_the_way(pngs, tmp_path, capsys) -> None:
    """The issue's folder: the user's README.md would be replaced by the card: one line, exit 2,
    every file as it was."""
    out = tmp_path / "u"
    users_folder(out)
    (out / "README.md").write_text("# my project")
    before = snapshot(out)
    argv = ["finetune", "resnet20", "--data", str(pngs), "--out", str(out), "--overwrite", "--max-steps", "1",
            "--no-post-training", "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zoo: error: --overwrite: {out} holds what this run would replace but no run wrote: ")
    assert "README.md (not written by a run)" in err and "Nothing was deleted" in err and len(err.splitlines()) == 1
    assert snapshot(out) == before


def test_overwrite_keeps_the_users_files_beside_the_run(pngs, tmp_path) -> None:
    out = tmp_path / "u"
    users_folder(out)
    run(pngs, out, tensorboard=True)
    assert (out / "checkpoints" / "last.pt").is_file() and (out / "tensorboard").is_dir()
    manifest = json.loads((out / MANIFEST).read_text())
    assert "checkpoints/my_model_v3.pt" not in manifest["files"] and "notes.txt" not in manifest["files"]
    assert manifest["folders"] == {"tensorboard": "sealed"}  # checkpoints/ is the user's folder
    first_card = (out / "README.md").read_text()
    run(pngs, out, tensorboard=False, seed=1)  # the earlier run's files go, TensorBoard's folder with them
    assert (out / "checkpoints" / "my_model_v3.pt").read_bytes() == b"weeks of training"
    assert (out / "notes.txt").read_text() == "my notes"
    assert not (out / "tensorboard").exists() and (out / "README.md").read_text() != first_card


def test_a_file_the_user_changed_or_added_in_a_runs_folder(pngs, tmp_path) -> None:
    out = tmp_path / "run"
    run(pngs, out)
    (out / "checkpoints" / "mine.pt").write_bytes(b"the user's, in the run's folder")
    (out / "README.md").write_text("# my edits to the card")
    with pytest.raises(InvalidArgumentError, match=r"README.md \(changed since the run wrote it\)"):
        run(pngs, out)
    assert (out / "README.md").read_text() == "# my edits to the card" and (out / "checkpoints" / "last.pt").exists()
    (out / "README.md").unlink()
    run(pngs, out)
    assert (out / "checkpoints" / "mine.pt").read_bytes() == b"the user's, in the run's folder"


def test_a_link_in_the_runs_way_is_refused_and_never_followed(pngs, tmp_path) -> None:
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run(pngs, out)
    elsewhere.mkdir()
    (elsewhere / "events.out.tfevents.1").write_bytes(b"another project's logs")
    os.symlink(elsewhere, out / "tensorboard")
    before = snapshot(out)
    with pytest.raises(InvalidArgumentError, match=rf"tensorboard \(a link, to {elsewhere}\).*Nothing was deleted"):
        run(pngs, out)
    assert snapshot(out) == before and (elsewhere / "events.out.tfevents.1").exists()


def test_a_killed_runs_files_are_its_own(pngs, tmp_path) -> None:
    """A run stopped before it sealed its manifest still owns what it claimed."""
    out = tmp_path / "run"
    run(pngs, out, checkpoint_every=1)
    manifest = json.loads((out / MANIFEST).read_text())
    killed = {"format": manifest["format"], "files": dict.fromkeys(manifest["files"]), "folders": {}}
    killed["folders"] = {"checkpoints": "pending"}
    (out / MANIFEST).write_text(json.dumps(killed))
    (out / "metrics.json").write_text("half-written by the killed run")
    run(pngs, out)
    assert json.loads((out / "metrics.json").read_text())["history"]


def test_a_damaged_manifest_is_named(pngs, tmp_path) -> None:
    out = tmp_path / "run"
    run(pngs, out)
    (out / MANIFEST).write_text('{"format": "zoo-run-files/1", "files": ["README.md"]}')
    with pytest.raises(InvalidArgumentError, match=f"{out / MANIFEST} is not a run's list of files"):
        run(pngs, out)


def test_the_demos_digits_from_a_larger_run_do_not_stay(tmp_path) -> None:
    out = tmp_path / "demo"
    for per_class in (20, 5):
        with prepare(out, demo.DEMO_OUTPUTS, resume=False, overwrite=True).sealing():
            train, _, _ = demo.write_digits_folder(out / "digits", per_class, 2)
        assert len(list(train.rglob("*.png"))) == 10 * per_class
    (out / "digits" / "train" / "0" / "mine.png").write_bytes(b"x")
    with prepare(out, demo.DEMO_OUTPUTS, resume=False, overwrite=True).sealing():
        pass
    assert (out / "digits" / "train" / "0" / "mine.png").exists()  # not the demo's: kept


def test_a_folder_the_run_needs_to_itself_is_not_taken_from_the_user(tmp_path) -> None:
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "scan.png").write_bytes(b"the user's")
    with pytest.raises(InvalidArgumentError, match=r"digits \(a folder the run did not create\)"):
        prepare(tmp_path, (Output("digits", folder=True),), resume=False, overwrite=True)
    assert (tmp_path / "digits" / "scan.png").exists()


def test_unreadable_validation_images_stop_the_run_before_training(pngs, tmp_path, monkeypatch) -> None:
    """--val-data is opened and every image checked before anything trains or changes in --out."""
    val = tmp_path / "val"
    for label in ("a", "b"):
        (val / label).mkdir(parents=True)
        for i in range(20):
            (val / label / f"{i}.png").write_bytes((pngs / label / "0.png").read_bytes())
    (val / "b" / "19.png").write_bytes(b"not a png at all")
    monkeypatch.setattr(
        "zoo.training.loop.trainer.Trainer.fit", lambda *a: pytest.fail("trained before the data was checked")
    )
    out = tmp_path / "out"
    options = FinetuneOptions(post_training=False, val_data=val)
    with pytest.raises(DataError, match=f"{val / 'b' / '19.png'} is not a readable image"):
        finetune_with_config("resnet20", pngs, out, options, config=TrainConfig(max_steps=1, batch_size=4, **QUIET))
    assert not out.exists()


def test_weights_swapped_in_a_run_folder_load_with_a_warning(tmp_path: Path) -> None:
    import warnings

    import safetensors.torch
    import torch

    import zoo

    data = tmp_path / "data.pt"
    torch.save({"x": torch.rand(16, 6), "y": torch.arange(16) % 2}, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture, trained from scratch
        run = zoo.finetune("dbn", data, tmp_path / "run", model_kwargs={"sizes": [6, 4]}, max_steps=1, **QUIET).out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the run's own weights: no warning
        zoo.load(run)
    other = zoo.load(run, pretrained=False)  # the architecture, fresh weights
    safetensors.torch.save_model(other, str(Path(run) / "model.safetensors"))  # same shapes, other values
    with pytest.warns(UserWarning, match=r"model.safetensors is not the file the run wrote \(its sha256 differs"):
        zoo.load(run)
