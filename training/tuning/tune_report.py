"""What ``zoo tune`` says and draws: a progress line per trial, ``tune.json`` (the best trial) and
``trials.png`` (each trial's value and the best so far; beside it, the parameters' importances
once 3 trials completed)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.errors import InvalidArgumentError, ZooError
from zoo.store.files import atomic_path, read_json, write_json

__all__ = ["PLOT_FILE", "SUMMARY_FILE", "plot_trials", "settings", "summary_trial", "trial_line", "write_summary"]

PLOT_FILE = "trials.png"
SUMMARY_FILE = "tune.json"
TRIALS_DIR = "trials"  # OUT/trials/NNN: each trial's run folder


def settings(params: Mapping[str, Any]) -> str:
    """Settings in one short line: ``lr 0.0021, epochs 20, mode full``."""
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items()) or "defaults"


def _state(trial: Any) -> str:
    return getattr(trial.state, "name", str(trial.state)).lower()


def trial_line(study: Any, trial: Any, metric: str) -> str:
    """``trial 3: lr 0.0021, ... -> val_acc 0.9433 (41 s); best 0.9500 (trial 1)``, a pruned
    trial with the epoch it stopped after and its last reported value."""
    done = trial.user_attrs.get("seconds")
    took = f" ({done:.0f} s)" if done is not None else ""
    if _state(trial) == "complete":
        outcome = f"{metric} {trial.value:.4f}"
    elif _state(trial) == "pruned":
        last = trial.intermediate_values.get(trial.last_step) if trial.last_step is not None else None
        shown = f" at {last:.4f}" if last is not None else ""
        outcome = f"pruned after epoch {trial.user_attrs.get('pruned_at', trial.last_step)}{shown}"
    else:
        outcome = _state(trial)
    try:
        best = study.best_trial
        leader = f"; best {best.value:.4f} (trial {best.number})"
    except ValueError:
        leader = ""
    first = trial.user_attrs.get("default")
    default = {"defaults": " [zoo finetune's defaults]", "first": " [the first settings given]"}.get(first, "")
    return f"trial {trial.number}{default}: {settings(trial.params)} -> {outcome}{took}{leader}"


def trial_folder(out: Path, number: int) -> Path:
    """Trial ``number``'s run folder inside the study folder ``out``: found from the number, never
    from a path the study's database holds (a copied or crafted study.db cannot point elsewhere)."""
    if not isinstance(number, int) or number < 0:
        raise InvalidArgumentError(
            f"{out / 'study.db'}: a trial's number is {number!r}, not a count; this is no study zoo tune wrote"
        )
    return out / TRIALS_DIR / f"{number:03d}"


def write_summary(out: Path, trial: Any) -> None:
    """``tune.json``: the best trial's number, value, settings and run folder."""
    summary = {
        "best_trial": trial.number,
        "best_value": trial.value,
        "best_params": trial.params,
        "best_epoch": trial.user_attrs.get("best_epoch"),
        "folder": trial_folder(out, trial.number).relative_to(out).as_posix(),
    }
    write_json(summary, out / SUMMARY_FILE)


def summary_trial(out: Path) -> int | None:
    """The trial ``tune.json`` names as the best (None: no summary yet)."""
    path = out / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        return read_json(path, 1 << 20).get("best_trial")
    except (ZooError, OSError, ValueError, AttributeError):
        return None


def _history(ax: Any, study: Any, metric: str) -> None:
    """Each trial's value (a pruned one's last report, hollow), and the best so far."""
    maximise = study.direction.name == "MAXIMIZE"
    best, line = None, []
    for trial in study.trials:
        state = _state(trial)
        if state == "complete":
            ax.scatter(trial.number, trial.value, color="C0", zorder=3)
            best = trial.value if best is None else (max if maximise else min)(best, trial.value)
        elif state == "pruned" and trial.intermediate_values:
            value = trial.intermediate_values[trial.last_step]
            ax.scatter(trial.number, value, facecolors="none", edgecolors="C3", zorder=3)
        line.append((trial.number, best))
    drawn = [(n, b) for n, b in line if b is not None]
    if drawn:
        ax.step(*zip(*drawn), where="post", color="C1", label="best so far")
    ax.scatter([], [], color="C0", label="complete")
    ax.scatter([], [], facecolors="none", edgecolors="C3", label="pruned (last epoch reported)")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"{metric} (validation, best epoch)")
    ax.legend(fontsize=8)
    ax.set_title("trials")


def _importances(ax: Any, study: Any, metric: str) -> None:
    """The parameters' importances (`optuna.importance`'s default evaluator), or with too few trials a note."""
    import optuna

    complete = [t for t in study.trials if _state(t) == "complete"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few trials: Optuna says its importances may be rough
            importances = optuna.importance.get_param_importances(study) if len(complete) >= 3 else {}
    except (ValueError, RuntimeError, ZeroDivisionError, ImportError):  # a constant value, one setting, no scipy
        importances = {}
    if not importances:
        ax.text(0.5, 0.5, "importances need 3 or more\ncompleted trials that differ", ha="center", va="center")
        ax.set_axis_off()
        return
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color="C2")
    ax.set_xlabel(f"importance for {metric} (optuna.importance)")
    ax.set_title("parameters")


def plot_trials(study: Any, path: Path, metric: str) -> Path:
    """Draw the trials (`_history`) and the importances (`_importances`) into ``path``, atomically
    (a study continued later redraws it: a reader never sees half of one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    try:
        _history(left, study, metric)
        _importances(right, study, metric)
        figure.tight_layout()
        with atomic_path(path) as tmp:
            figure.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(figure)
    return path
