"""``zoo tune`` and ``--track`` at their edges (hardening round 5): a study continued with its
best folder and the best trial's folder gone, a defaults trial cut off by Ctrl-C run again, a
``--metric`` the task does not report refused before the study is written, MLflow artifacts of a
``sqlite:///`` store beside the database, unwritable ``--track`` and ``--out`` folders named in
one line, and ``--lr auto`` said with ``--no-progress`` (the default kept on too few batches)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import optuna
import pytest
import torch
from test_numeric_options import write_pngs
from torch.utils.data import TensorDataset

import zoo
from zoo.cli import main
from zoo.training.finetune import keywords
from zoo.training.tuning.tune_space import active_space, default_params

pytestmark = pytest.mark.usefixtures("one_thread")

NAME = "resnet20.fmnist"  # bundled: no download
QUIET = dict(epochs=1, max_steps=1, batch_size=4, precision="fp32", num_workers=0, tensorboard=False, plot=False)
FLAGS = ["--epochs", "1", "--max-steps", "1", "--batch-size", "4", "--precision", "fp32", "--num-workers", "0",
         "--no-tensorboard", "--val-fraction", "0.5"]  # fmt: skip


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_pngs(tmp_path / "pngs", per_class=4)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("zoo: error: ") and "Errno" not in err, err
    return err


def _read_only(folder: Path, monkeypatch) -> None:
    """``folder`` made read-only; root ignores permission bits, so for root zoo's writability
    check (os.access) is answered as a read-only mount would answer it."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(
            os,
            "access",
            lambda p, m, **kw: False if m & os.W_OK and str(p).startswith(str(folder)) else real(p, m, **kw),
        )


def test_a_study_continued_without_its_best_folder_rebuilds_it_or_says_what_is_missing(
    data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    out = tmp_path / "study"
    zoo.tune(NAME, data, out, trials=1, val_fraction=0.5, **QUIET)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # continued from another working folder, --out relative to it
    argv = ["tune", NAME, "--data", str(data), "--out", "../study", "--trials", "1", *FLAGS]
    shutil.rmtree(out / "best")
    assert main(argv) == 0 and zoo.load(out / "best").num_classes == 2  # rebuilt from trials/000
    capsys.readouterr()
    shutil.rmtree(out / "best")
    shutil.rmtree(out / "trials" / "000")
    assert main([*argv[:7], "2", *FLAGS]) == 2  # --trials 2: refused before trial 1 runs
    err = _one_line(capsys)
    assert "../study/best is missing and so is the best trial's run folder ../study/trials/000 (trial 0)" in err
    assert "put ../study/trials/000 back" in err and "another --out" in err
    assert not (out / "trials" / "001").exists()


def test_a_defaults_trial_cut_off_by_ctrl_c_runs_again_when_the_study_continues(
    data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "o"
    with monkeypatch.context() as patch:
        patch.setattr(keywords, "finetune", interrupted)
        assert main(["tune", NAME, "--data", str(data), "--out", str(out), "--trials", "1", *FLAGS]) == 130
    capsys.readouterr()
    result = zoo.tune(NAME, data, out, trials=1, val_fraction=0.5, **QUIET)
    said = capsys.readouterr().out
    first, again = result.study.trials
    assert first.state == optuna.trial.TrialState.FAIL and again.state == optuna.trial.TrialState.COMPLETE
    fixed = {**QUIET, "val_fraction": 0.5}
    assert again.params == default_params(active_space(fixed, images=True, stages=3), fixed)
    assert again.user_attrs["default"] == "defaults" and "trial 1 [zoo finetune's defaults]" in said
    zoo.tune(NAME, data, out, trials=2, val_fraction=0.5, **QUIET)  # finished: not queued a second time
    assert "[zoo finetune's defaults]" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("metric", "said"),
    [("val_top5_acc", "--monitor val_top5_acc: a classification run reports val_acc, val_loss on validation"),
     ("val_rmse", "--monitor val_rmse: a classification run reports val_acc, val_loss on validation"),
     ("val_acuracy", "did you mean val_acc?")],
)  # fmt: skip
def test_a_metric_the_task_does_not_report_is_refused_before_the_study_is_written(
    data: Path, tmp_path: Path, capsys, metric: str, said: str
) -> None:
    out = tmp_path / "o"
    assert main(["tune", NAME, "--data", str(data), "--out", str(out), "--metric", metric, *FLAGS]) == 2
    err = _one_line(capsys)
    assert said in err and "new study" not in capsys.readouterr().out
    assert not out.exists()


def _tiny_trainer(**config) -> zoo.Trainer:
    torch.manual_seed(0)
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=2)
    quiet = dict(progress=False, tensorboard=False, plot=False, precision="fp32", num_workers=0, batch_size=4)
    return zoo.Trainer(model, zoo.TrainConfig(**{**quiet, **config}))


def _tiny_data(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 2, (n,), generator=g))


def test_a_sqlite_store_keeps_its_artifacts_beside_the_database(tmp_path: Path, monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    here, stores = tmp_path / "here", tmp_path / "stores"
    here.mkdir()
    stores.mkdir()
    monkeypatch.chdir(here)
    uri = f"sqlite:///{stores / 'runs.db'}"
    trainer = _tiny_trainer(epochs=1, max_steps=1, track=uri, out_dir=str(tmp_path / "run"))
    trainer.fit(_tiny_data(8), _tiny_data(4))
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("zoo").experiment_id])
    assert run.info.artifact_uri.startswith((stores / "mlartifacts").as_uri())
    assert (stores / "mlartifacts").is_dir() and any((stores / "mlartifacts").rglob("metrics.json"))
    assert not (here / "mlruns").exists() and list(here.iterdir()) == []


def test_an_unwritable_track_folder_is_named_not_writable(data: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    pytest.importorskip("mlflow")
    folder = tmp_path / "ro"
    folder.mkdir()
    _read_only(folder, monkeypatch)
    argv = ["finetune", NAME, "--data", str(data), "--out", str(tmp_path / "o"), "--no-progress", *FLAGS]
    try:
        assert main([*argv, "--track", str(folder / "mlruns")]) == 2
        err = _one_line(capsys)
        assert f"{folder} is not writable" in err and "name a folder you can write" in err
        assert "cannot create" not in err
        (tmp_path / "file.txt").write_text("")
        assert main([*argv, "--track", str(tmp_path / "file.txt" / "mlruns")]) == 2
        assert f"{tmp_path / 'file.txt'} is a file, not a folder" in _one_line(capsys)
    finally:
        folder.chmod(0o755)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["tune", "finetune"])
def test_an_unwritable_out_is_one_line_naming_the_folder(
    data: Path, tmp_path: Path, monkeypatch, capsys, command: str
) -> None:
    (tmp_path / "file.txt").write_text("")
    argv = [command, NAME, "--data", str(data), *FLAGS, "--out"]
    assert main([*argv, str(tmp_path / "file.txt" / "sub")]) == 2
    err = _one_line(capsys)
    assert f"--out {tmp_path / 'file.txt' / 'sub'}: {tmp_path / 'file.txt'} is a file, not a folder" in err
    folder = tmp_path / "ro"
    folder.mkdir()
    _read_only(folder, monkeypatch)
    try:
        assert main([*argv, str(folder / "run")]) == 2
        err = _one_line(capsys)
        assert f"--out {folder / 'run'}: {folder} is not writable" in err and "choose another --out" in err
    finally:
        folder.chmod(0o755)
    assert list(folder.iterdir()) == []


def test_lr_auto_is_said_without_progress_and_too_few_batches_keep_the_default(
    data: Path, tmp_path: Path, capsys
) -> None:
    """4 training samples make one batch: the sweep would step on it 50 times, its loss falling
    by memorising them; the default stays, and the line says why, with --no-progress too."""
    out = tmp_path / "o"
    argv = ["finetune", NAME, "--data", str(data), "--out", str(out), "--lr", "auto", "--no-progress"]
    assert main([*argv, "--val-fraction", "0.5", "--epochs", "1", "--no-post-training", "--no-tensorboard"]) == 0
    line = next((s for s in capsys.readouterr().out.splitlines() if s.startswith("lr auto: ")), None)
    assert line is not None and line.startswith("lr auto: 0.001 (the default: too few batches")
    assert "1 batch" in line and not (out / "lr_finder.png").exists()
    assert f"- {line}" in (out / "README.md").read_text()
    trainer = _tiny_trainer(epochs=1, lr="auto")
    trainer.fit(_tiny_data(48))  # 12 batches: the sweep runs as before
    assert trainer.lr_report.lrs and "too few batches" not in str(trainer.lr_report)
