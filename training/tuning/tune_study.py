"""What `zoo.training.tuning.tune` checks of OUT/study.db before Optuna opens it, and what makes
a study the same one: an existing study.db is read first, read-only (`check_storage`), and
refused untouched unless it is an Optuna storage holding zoo tune's study; a study continues
only with the same setup (`setup`, `changes`), which leaves out what does not change results
(tracking, progress, logging: `NOT_SETUP`) and compares data paths resolved (``shop/`` is ``shop``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from zoo.errors import InvalidArgumentError

__all__ = ["NOT_SETUP", "STUDY_NAME", "StudyFileError", "changes", "check_storage", "plain", "setup"]

STUDY_NAME = "zoo-tune"
NOT_SETUP = (  # fixed keywords that change no trial's result: a study goes on with or without them
    "track", "track_experiment", "progress", "no_progress", "tensorboard", "no_tensorboard", "plot", "log_every",
    "checkpoint_every", "profile", "pin_memory", "persistent_workers",
)  # fmt: skip


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
