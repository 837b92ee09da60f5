"""What `zoo.training.tuning.tune` checks of OUT/study.db before Optuna opens it, and what makes
a study the same one: an existing study.db is read first, read-only (`check_storage`), and
refused untouched unless it is an Optuna storage holding zoo tune's study; a study continues
only with the same setup (`setup`, `changes`), which leaves out what does not change results
(tracking, progress, logging: `NOT_SETUP`) and compares data paths resolved (``shop/`` is ``shop``);
the metric it compares trials on is one the task's runs report (`check_metric`), checked before
the study is written. A continued study runs its first trial again when Ctrl-C or an error cut it
off (`first_ran`), and needs the best trial's run folder when OUT/best is gone (`check_best`).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from zoo.errors import InvalidArgumentError
from zoo.training.tuning import tune_report

__all__ = [
    "AUX_METRIC",
    "NOT_SETUP",
    "REPORTED",
    "STUDY_NAME",
    "StudyFileError",
    "changes",
    "check_metric",
    "check_best",
    "check_storage",
    "first_ran",
    "plain",
    "setup",
]

STUDY_NAME = "zoo-tune"
NOT_SETUP = (  # fixed keywords that change no trial's result: a study goes on with or without them
    "track", "track_experiment", "progress", "no_progress", "tensorboard", "no_tensorboard", "plot", "log_every",
    "checkpoint_every", "profile", "pin_memory", "persistent_workers",
)  # fmt: skip


REPORTED = {  # a run's validation metrics by task (zoo.training.loop.meter.EpochMeter.result): the first is the default
    "classification": ("val_acc", "val_loss"),
    "regression": ("val_loss", "val_rmse", "val_mae", "val_r2"),  # val_loss first: zoo finetune's monitor
    "multi-label": ("val_map", "val_f1_micro", "val_f1_macro", "val_loss"),
}
AUX_METRIC = "val_aux_loss"  # reported too by a model with an auxiliary loss (the MoE models)


class StudyFileError(InvalidArgumentError):
    """OUT/study.db is not a zoo tune study (not SQLite, another database, another Optuna study)."""


def _refuse(path: Path, why: str) -> StudyFileError:
    return StudyFileError(
        f"{path} is not a zoo tune study ({why}); zoo tune leaves it as it is: pass another --out "
        "(a new or empty folder)"
    )


def check_storage(path: Path) -> None:
    """Before Optuna touches an existing ``path`` (OUT/study.db): opened read-only, it must be a
    SQLite database with Optuna's ``studies`` table naming zoo tune's study; else refused,
    its bytes unchanged."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            names = {row[0] for row in db.execute("SELECT study_name FROM studies")} if "studies" in tables else set()
    except sqlite3.Error as error:
        raise _refuse(path, f"not a SQLite database Optuna wrote: {error}") from None
    if not tables:
        raise _refuse(path, "an empty file" if path.stat().st_size == 0 else "a SQLite database with no tables")
    if "studies" not in tables:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise _refuse(path, f"a SQLite database of other tables: {shown}")
    if STUDY_NAME not in names:
        raise _refuse(path, f"an Optuna storage without the study {STUDY_NAME!r}")


def check_metric(metric: str | None, task: str, aux: bool) -> str:
    """The metric trials are compared on: ``metric`` when a ``task`` run reports it on validation
    (`REPORTED`; `AUX_METRIC` too when ``aux``), else refused naming those and the close one;
    None is the task's own. Checked before the study is written: a typo leaves no folder."""
    reported = (*REPORTED[task], *((AUX_METRIC,) if aux else ()))
    if metric is None:
        return reported[0]
    if metric not in reported:
        close = difflib.get_close_matches(metric, reported, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise InvalidArgumentError(
            f"--monitor {metric}: a {task} run reports {', '.join(reported)} on validation; {hint}pass one of them "
            "(nothing was written)"
        )
    return metric


def first_ran(study: Any) -> bool:
    """Whether the study's first trial (zoo finetune's defaults, or ``first=``) ran or waits to:
    one that Ctrl-C or an error cut off runs again when the study continues, said here."""
    firsts = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("default")]
    if any(t.state.name in ("COMPLETE", "PRUNED", "WAITING") for t in firsts):
        return True
    if firsts:
        which = {"defaults": "zoo finetune's defaults", "first": "the first settings given"}
        named = which.get(firsts[-1].user_attrs["default"], "the first settings")
        print(f"zoo tune: trial {firsts[-1].number} ({named}) did not finish: it runs again first")
    return False


def check_best(study: Any, out: Path, kept: Path) -> None:
    """A continued study's best folder ``kept`` (OUT/best), gone or another trial's, is rebuilt
    from the best trial's run folder; without that folder too it cannot be: refused before a
    trial runs, naming both and the fix."""
    try:
        best = study.best_trial
    except ValueError:  # no trial completed
        return
    named = tune_report.summary_trial(out)
    folder = tune_report.trial_folder(out, best.number)
    if (kept.is_dir() and named == best.number) or folder.is_dir():
        return
    run = f"the best trial's run folder {folder} (trial {best.number})"
    what = (
        f"is not the best trial's ({tune_report.SUMMARY_FILE} names trial {named}) and {run} is missing"
        if kept.is_dir()
        else f"is missing and so is {run}"
    )
    raise InvalidArgumentError(
        f"--out {out}: {kept} {what}: zoo tune cannot rebuild {kept}; put {folder} back, or pass another --out "
        "for a new study"
    )


def plain(value: Any) -> Any:
    """A fixed value as the study records it (JSON: paths and objects by their text)."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return os.fspath(value) if isinstance(value, os.PathLike) else repr(value)


def _data(data: Any) -> str:
    """The data as the study records it: a local path resolved (absolute), else as given."""
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data)
        return str(Path(text).resolve()) if os.path.exists(text) else text
    return type(data).__name__


def setup(name: str, data: Any, fixed: Mapping[str, Any], metric: str, pruner: str) -> dict[str, Any]:
    """What makes a study this one: the model, data, fixed settings (but `NOT_SETUP`), metric and pruner."""
    kept = {k: plain(v) for k, v in fixed.items() if k not in NOT_SETUP}
    return json.loads(json.dumps({"name": name, "data": _data(data), "fixed": kept, "metric": metric,
                                  "pruner": pruner}))  # fmt: skip


def _compared(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored setup as `setup` writes it now (an older study's: relative data, NOT_SETUP kept)."""
    fixed = stored.get("fixed")
    fixed = {k: v for k, v in fixed.items() if k not in NOT_SETUP} if isinstance(fixed, dict) else fixed
    data = _data(stored["data"]) if isinstance(stored.get("data"), str) else stored.get("data")
    return {**stored, "fixed": fixed, "data": data}


def changes(stored: Any, current: Mapping[str, Any]) -> str:
    """How ``current`` differs from a study's ``stored`` setup ("" when it does not)."""
    was = _compared(stored) if isinstance(stored, dict) else {}
    return "; ".join(f"{k} was {was.get(k)!r}, now {current[k]!r}" for k in current if was.get(k) != current[k])
