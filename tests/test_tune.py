"""``zoo tune`` / ``zoo.tune`` (`zoo.training.tuning.tune`): a real study of a few tiny trials
(each one zoo.finetune run into OUT/trials/NNN, the best in OUT/best that zoo.load reads, the
plot), the same call again continuing the study, a trial the pruner stops recorded PRUNED after
its early epochs, and the refusals: one line and exit 2 on the command line."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sqlite3
import sys
from pathlib import Path

import optuna
import pytest
from test_numeric_options import write_pngs

import zoo
from zoo.cli import main
from zoo.cli.parser import build_parser
from zoo.errors import InvalidArgumentError
from zoo.training.finetune import keywords
from zoo.training.tuning import tune, tune_study
from zoo.training.tuning.tune_space import SEARCH_SPACE, active_space, default_params, trial_keywords

pytestmark = pytest.mark.usefixtures("one_thread")

NAME = "resnet20.fmnist"  # bundled: no download
QUIET = dict(epochs=2, max_steps=2, batch_size=4, precision="fp32", num_workers=0, tensorboard=False, plot=False)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_pngs(tmp_path / "pngs", per_class=4)


def test_a_study_runs_continues_and_its_best_loads(data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "study"
    result = zoo.tune(NAME, data, out, trials=2, val_fraction=0.5, **QUIET)
    said = capsys.readouterr().out
    assert "new study" in said and "objective: maximise val_acc" in said
    assert "trial 0 [zoo finetune's defaults]" in said and "trial 1:" in said
    assert len(result.study.trials) == 2 and result.metric == "val_acc" and result.direction == "maximize"
    assert all("epochs" not in t.params for t in result.study.trials)  # fixed, not searched
    assert (out / "trials" / "000" / "config.json").is_file() and (out / "trials" / "001" / "README.md").is_file()
    assert result.best_out == out / "best" and (out / "trials.png").is_file() and (out / "tune.json").is_file()
    model = zoo.load(out / "best")
    assert model.num_classes == 2 and model.pretrained_cfg["class_names"] == ["a", "b"]

    stopped = optuna.load_study(study_name=tune.STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}")
    stopped.ask()  # trial 2: a run stopped mid-trial (Ctrl-C, a lost machine) leaves it RUNNING
    again = zoo.tune(NAME, data, out, trials=3, val_fraction=0.5, **QUIET)
    said = capsys.readouterr().out
    assert "continuing the study" in said and "(2 trials finished)" in said and "trial 3:" in said
    assert "trial 2 was cut off by a stopped run: marked failed" in said
    states = [t.state.name for t in again.study.trials]
    assert states[2] == "FAIL" and len(states) == 4 and (out / "trials" / "003").is_dir()
    with pytest.raises(InvalidArgumentError, match=r"another setup \(fixed was \{.*.epochs.: 2"):
        zoo.tune(NAME, data, out, trials=3, val_fraction=0.5, **{**QUIET, "epochs": 3})


class _PruneAfterFirstEpoch(optuna.pruners.BasePruner):
    """Prunes every trial but the first once it reported an epoch: a clearly bad trial, made so."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return trial.number > 0 and bool(trial.intermediate_values)


def test_a_pruned_trial_stops_after_its_early_epoch_and_is_recorded_pruned(
    data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Tracked to MLflow too: the study a parent run, each trial a nested run under it."""
    monkeypatch.setattr(tune, "_pruner", lambda optuna, name: _PruneAfterFirstEpoch())
    quick = {**QUIET, "epochs": 3, "max_steps": None, "batch_size": 8, "mode": "linear-probe"}
    store = tmp_path / "mlruns"
    result = zoo.tune(NAME, data, tmp_path / "study", trials=2, val_fraction=0.5, track=str(store), **quick)
    first, second = result.study.trials
    assert first.state == optuna.trial.TrialState.COMPLETE and first.user_attrs["best_epoch"] >= 1
    assert second.state == optuna.trial.TrialState.PRUNED and second.user_attrs["pruned_at"] == 1
    assert list(second.intermediate_values) == [1]  # stopped after epoch 1 of 3
    assert "pruned after epoch 1" in capsys.readouterr().out and result.best_trial == 0

    mlflow = pytest.importorskip("mlflow")
    client = mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parent = next(r for r in runs if r.info.run_name == f"zoo tune {NAME}")
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"000", "001"} and parent.data.params["best_trial"] == "0"
    assert [m.step for m in client.get_metric_history(children["001"].info.run_id, "val_acc")] == [1]


def test_the_median_pruner_reads_the_runs_best_so_far() -> None:
    """`_Pruning` reports the best value so far each epoch and stops the Trainer when told to."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(1, 0))
    good = study.ask()
    for epoch in (1, 2):
        good.report(0.9, epoch)
    study.tell(good, 0.9)
    bad, trainer = study.ask(), argparse.Namespace(should_stop=False)
    pruning = tune._Pruning(bad, "val_acc", maximise=True)
    pruning(trainer, {"epoch": 1, "val_acc": 0.2, "val_loss": 3.0})
    assert trainer.should_stop and pruning.pruned_at == 1
    with pytest.raises(InvalidArgumentError, match="--monitor val_rmse: the runs report val_acc, val_loss"):
        tune._Pruning(study.ask(), "val_rmse", maximise=False)(trainer, {"epoch": 1, "val_acc": 0.2, "val_loss": 3.0})


def test_the_search_space_is_data_and_fixed_flags_leave_it() -> None:
    space = active_space({}, images=True, stages=3)
    assert [p.name for p in space] == [p.name for p in SEARCH_SPACE]
    lr = next(p for p in space if p.name == "lr")
    assert lr.kind == "log" and lr.low < 1e-3 < lr.high  # around the default
    fixed = {"epochs": 5, "crop_padding": 2, "mode": "full"}
    names = [p.name for p in active_space(fixed, images=True, stages=3)]
    assert "epochs" not in names and "augment" not in names and "mode" not in names
    assert "augment" not in [p.name for p in active_space({}, images=False, stages=3)]
    assert default_params(space, {}) == {
        "lr": 1e-3, "epochs": 10, "batch_size": 64, "mode": "full", "layer_decay": 1.0, "augment": "none"
    }  # fmt: skip
    assert trial_keywords({"augment": "medium", "layer_decay": 1.0}) == {"crop_padding": 4, "random_erasing": 0.25}
    first = default_params(space, {}, {"lr": 3e-3, "mode": "partial"})  # the first trial a caller names
    assert first["lr"] == 3e-3 and first["stages"] == 1 and "layer_decay" not in first
    with pytest.raises(InvalidArgumentError, match="'epochs' is not searched here"):
        default_params(active_space({"epochs": 5}, images=True), {"epochs": 5}, {"epochs": 30})
    with pytest.raises(InvalidArgumentError, match=r"batch_size 48 is outside one of 16, 32, 64"):
        default_params(space, {}, {"batch_size": 48})


def test_the_command_line_fixes_only_the_flags_typed(tmp_path: Path) -> None:
    argv = ["tune", NAME, "--data", "d", "--out", "o", "--epochs", "3", "--crop-padding", "2", "--no-tensorboard"]
    args = build_parser(argv).parse_args(argv)
    fixed = {k for k in vars(args) if k not in (*tune.OWN, "command")}
    assert fixed == {"epochs", "crop_padding", "tensorboard", "_given_config_options"}
    parser = argparse.ArgumentParser()
    tune.add_arguments(parser)
    dests = {a.dest for a in parser._actions} - {*tune.OWN, "help"}
    assert dests <= keywords.KEYWORDS | set(tune.TUNE_OWNS)  # every finetune flag is a zoo.finetune keyword


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--trials", "0"], "argument --trials: must be from 1"),
        (["--timeout", "-5"], "argument --timeout: must be"),
        (["--bogus-flag", "1"], "unrecognized arguments: --bogus-flag"),
        (["--pruner", "best"], "argument --pruner: invalid choice"),
        (["--first", "[1]"], "argument --first: must be a JSON object"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(data: Path, tmp_path: Path, capsys, flags: list[str], said: str) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["tune", NAME, "--data", str(data), "--out", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_refusals_before_anything_trains(data: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main(["tune", NAME, "--data", str(data), "--out", str(tmp_path / "mine"), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "holds files and no zoo tune study (study.db)" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert main(["tune", NAME, "--data", str(data), "--out", str(tmp_path / "o"), "--overwrite"]) == 2
    assert "drop overwrite=" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="unknown keyword epoch=: did you mean epochs="):
        zoo.tune(NAME, data, tmp_path / "o", trials=2, epoch=5)
    with pytest.raises(InvalidArgumentError, match=r"trials \(--trials\) must be"):
        zoo.tune(NAME, data, tmp_path / "o", trials=0)
    assert not (tmp_path / "o").exists()


def test_without_optuna_one_line_names_the_extra(data: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna: ImportError
    assert main(["tune", NAME, "--data", str(data), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "zoo: error: zoo tune searches with Optuna, which is not installed: pip install 'zoo[tune]'"


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("zoo: error: ")
    return err


def _own_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE mydata (x INTEGER)")
        db.execute("INSERT INTO mydata VALUES (1)")
    db.close()


def _other_optuna_study(path: Path) -> None:
    optuna.create_study(study_name="mine", storage=f"sqlite:///{path}")


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda p: p.write_text("my notes\n" * 50), "not a SQLite database Optuna wrote"),
        (lambda p: p.write_bytes(b""), "an empty file"),
        (_own_sqlite, "a SQLite database of other tables: mydata"),
        (_other_optuna_study, "an Optuna storage without the study 'zoo-tune'"),
    ],
)
def test_a_study_db_not_zoo_tunes_is_refused_unchanged(data: Path, tmp_path: Path, capsys, make, why: str) -> None:
    """OUT/study.db that is a text file, an empty file, the user's own SQLite database or another
    Optuna study: read read-only and refused in one line, its bytes as they were."""
    out = tmp_path / "o"
    out.mkdir()
    make(out / "study.db")
    before = hashlib.sha256((out / "study.db").read_bytes()).hexdigest()
    err = _refused(["tune", NAME, "--data", str(data), "--out", str(out), "--trials", "2"], capsys)
    assert f"{out / 'study.db'} is not a zoo tune study ({why}" in err and "pass another --out" in err
    assert hashlib.sha256((out / "study.db").read_bytes()).hexdigest() == before
    assert sorted(p.name for p in out.iterdir()) == ["study.db"]


def test_ctrl_c_is_one_line_and_the_trial_is_marked_failed(data: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """Ctrl-C in a trial: `zoo: interrupted` (exit 130), no Optuna warning; the trial FAIL in study.db."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    said: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = said.append
    logging.getLogger("optuna").addHandler(handler)
    monkeypatch.setattr(keywords, "finetune", interrupted)
    try:
        assert main(["tune", NAME, "--data", str(data), "--out", str(tmp_path / "o"), "--val-fraction", "0.5"]) == 130
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    assert capsys.readouterr().err.strip() == "zoo: interrupted" and not said
    stored = optuna.load_study(study_name=tune.STUDY_NAME, storage=f"sqlite:///{tmp_path / 'o' / 'study.db'}")
    assert [t.state.name for t in stored.trials] == ["FAIL"]


def test_an_unreachable_tracking_server_is_refused_before_the_study_is_written(
    data: Path, tmp_path: Path, capsys
) -> None:
    argv = ["tune", NAME, "--data", str(data), "--out", str(tmp_path / "o"), "--track", "http://127.0.0.1:1"]
    err = _refused(argv, capsys)
    assert "'http://127.0.0.1:1'" in err and "new study" not in capsys.readouterr().out
    assert not (tmp_path / "o").exists()


def test_the_setup_leaves_out_tracking_and_compares_data_resolved(tmp_path: Path, monkeypatch) -> None:
    """Tracking, progress and logging change no result: a study goes on with or without them; the
    data ``shop/`` is ``shop`` (and a study stored as typed, relative, still matches)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop").mkdir()
    stored = tune_study.setup(NAME, "shop", {"epochs": 2, "track": "http://127.0.0.1:1"}, "val_acc", "median")
    assert stored["data"] == str(tmp_path / "shop") and stored["fixed"] == {"epochs": 2}
    again = tune_study.setup(NAME, "shop/", {"epochs": 2, "track": "./mlruns", "progress": False}, "val_acc", "median")
    assert tune_study.changes(stored, again) == ""
    older = {**stored, "data": "shop", "fixed": {"epochs": 2, "track": "http://127.0.0.1:1", "track_experiment": "x"}}
    assert tune_study.changes(older, again) == ""
    other = tune_study.setup(NAME, "shop", {"epochs": 3}, "val_acc", "median")
    assert tune_study.changes(stored, other) == "fixed was {'epochs': 2}, now {'epochs': 3}"


def test_best_is_copied_from_the_trials_own_folder_never_from_a_path_the_study_holds(tmp_path: Path) -> None:
    """Issue 62, case 5: a crafted (or copied) study.db whose trial names another folder as its
    ``out`` cannot make OUT/best a copy of that folder."""
    from types import SimpleNamespace

    from zoo.training.tuning import tune, tune_report

    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "private.txt").write_text("not the study's")
    out = tmp_path / "study"
    own = tune_report.trial_folder(out, 2)
    own.mkdir(parents=True)
    (own / "config.json").write_text("{}")
    crafted = SimpleNamespace(number=2, value=0.9, params={}, user_attrs={"out": str(secret), "best_epoch": 1})
    tune._save_best(out, crafted)
    assert sorted(p.name for p in (out / "best").iterdir()) == ["config.json"]
    assert json.loads((out / "tune.json").read_text())["folder"] == "trials/002"
    with pytest.raises(InvalidArgumentError, match=r"study\.db: a trial's number is -1, not a count"):
        tune_report.trial_folder(out, -1)


def test_a_second_zoo_tune_on_a_study_in_use_is_refused_naming_the_first(data: Path, tmp_path: Path) -> None:
    """Issue 62, case 4: two zoo tune runs on one --out marked each other's running trial as
    cut off; now the second is refused before it opens the study."""
    import subprocess

    out = tmp_path / "study"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from zoo.training.tuning import tune; from pathlib import Path\n"
         f"with tune._study_lock(Path({str(out)!r})):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"  # waits on the holder's word, not a sleep
        with pytest.raises(InvalidArgumentError, match=rf"is in use by another zoo tune \(process {holder.pid}\)"):
            zoo.tune(NAME, data, out, trials=1, val_fraction=0.5, **QUIET)
        assert not (out / "study.db").exists()
    finally:
        holder.communicate(input="", timeout=60)
    result = zoo.tune(NAME, data, out, trials=1, val_fraction=0.5, **QUIET)  # free again: the study runs
    assert len(result.study.trials) == 1 and not any(p.name.startswith(".zoo") for p in out.iterdir())
