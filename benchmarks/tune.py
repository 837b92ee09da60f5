"""``zoo tune`` on the demo's task against the demo's defaults, side by side on a held-out test set.

The task is ``zoo demo``'s: scikit-learn's handwritten digits as 28x28 images, 10 per class to
train, ``resnet20.fmnist`` fine-tuned (`zoo.training.demo`). Here the demo's evaluation images
are split in two: a validation set (``--val-per-class``) that the search and every run's best
epoch are chosen on, and a test set (``--test-per-class``) that nothing is chosen on.

1. ``zoo.tune`` searches with at most ``--trials`` trials (and ``--timeout`` seconds), seed 0,
   the demo's warmup epoch fixed, the rest of its settings searched, its first trial the demo's
   settings (``first=``: the search starts from the default it is meant to beat);
2. the best trial's settings and the demo's defaults (30 epochs, batch 32, lr 1e-3, a warmup
   epoch, crop padding 2) each run again with ``--seeds`` (not 0, the seed the search used);
3. each run's best epoch is scored on the test set (`zoo.training.scoring.score_file`).

The search picked its settings on the validation set, so its own validation figures are
optimistic; the test column is the honest one. One row per run (and one per trial) goes to the
CSVs, the machine in the first line printed. Runs train in fp32 on ``--threads`` torch threads.

    .venv/bin/python benchmarks/tune.py [--trials 10] [--timeout 600] [--seeds 1 2 3] [--pruner median] [--work DIR]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo.training.demo import write_digits_folder
from zoo.training.scoring import score_file
from zoo.training.tuning.tune_space import trial_keywords

WEIGHTS = "resnet20.fmnist"
DEMO = {"epochs": 30, "batch_size": 32, "lr": 1e-3, "warmup_epochs": 1.0, "crop_padding": 2}  # zoo demo's
QUIET = {"precision": "fp32", "num_workers": 0, "tensorboard": False, "progress": False, "post_training": False}
RESULTS = Path(__file__).resolve().parent.parent / "results" / "tune"


def digits_splits(root: Path, val_per_class: int, test_per_class: int) -> tuple[Path, Path, Path]:
    """The demo's digits (seed 0) as train/, val/ and test/ image folders (`write_digits_folder`)."""
    return write_digits_folder(root, 10, test_per_class, seed=0, val_per_class=val_per_class)


def run(train: Path, val: Path, test: Path, out: Path, seed: int, keywords: dict[str, Any]) -> dict[str, Any]:
    """One zoo.finetune run and its best epoch scored on validation and test."""
    start = time.perf_counter()
    result = zoo.finetune(WEIGHTS, train, out, val_data=str(val), seed=seed, **QUIET, **keywords)
    seconds = time.perf_counter() - start
    scores = score_file(str(out), test, progress=False)
    return {
        "seed": seed,
        "val_acc": round(result.metrics["val_acc"], 4),
        "test_acc": round(scores["accuracy"], 4),
        "best_epoch": result.metrics.get("epoch"),
        "seconds": round(seconds, 1),
    }


def settings(keywords: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in keywords.items())


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """The search's trials: number, state, settings, value (a pruned one's last report), epochs, time."""
    rows = []
    for trial in study.trials:
        last = trial.intermediate_values.get(trial.last_step) if trial.last_step is not None else None
        rows.append({
            "trial": trial.number,
            "state": trial.state.name.lower(),
            "settings": settings(trial_keywords(trial.params)),
            "val_acc": round(trial.value if trial.value is not None else last or float("nan"), 4),
            "pruned_at": trial.user_attrs.get("pruned_at", ""),
            "seconds": trial.user_attrs.get("seconds", ""),
        })  # fmt: skip
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def summary(rows: list[dict[str, Any]], arm: str, key: str) -> str:
    values = [r[key] for r in rows if r["arm"] == arm]
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds after which the search starts no trial")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--val-per-class", type=int, default=20)
    parser.add_argument("--test-per-class", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--pruner", default="median", choices=("median", "halving", "none"))
    parser.add_argument("--name", default="digits", help="the CSVs' name in results/tune/")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from molecule_speed import machine  # benchmarks/ is on sys.path when run as a script

    print(machine())
    work = args.work or Path(tempfile.mkdtemp(prefix="zoo-tune-bench-"))
    train, val, test = digits_splits(work / "digits", args.val_per_class, args.test_per_class)
    started = time.perf_counter()
    fixed = {"val_data": str(val), "warmup_epochs": DEMO["warmup_epochs"], **QUIET}
    fixed.pop("progress")
    fixed.pop("post_training")  # zoo tune turns both off in its trials itself
    first = {"lr": DEMO["lr"], "epochs": DEMO["epochs"], "batch_size": DEMO["batch_size"], "augment": "light"}
    result = zoo.tune(WEIGHTS, train, work / "study", trials=args.trials, timeout=args.timeout, first=first, pruner=args.pruner,
                      **fixed)  # fmt: skip
    search_s = time.perf_counter() - started
    tuned = {"warmup_epochs": DEMO["warmup_epochs"], **trial_keywords(result.best_params)}
    rows = []
    for arm, keywords in (("default", DEMO), ("tuned", tuned)):
        for seed in args.seeds:
            if arm == "tuned" and result.best_trial == 0:  # the first trial, the demo's settings, won: the same run
                row = next({k: r[k] for k in list(r)[2:]} for r in rows if r["seed"] == seed)
            else:
                row = run(train, val, test, work / f"{arm}-{seed}", seed, keywords)
            rows.append({"arm": arm, "settings": settings(keywords), **row})
            print(rows[-1], flush=True)
    write_csv(RESULTS / f"{args.name}.csv", rows)
    write_csv(RESULTS / f"{args.name}-trials.csv", trial_rows(result.study))
    shutil.copy(work / "study" / "trials.png", RESULTS / f"{args.name}-trials.png")
    print(f"search: {len(result.study.trials)} trials in {search_s:.0f} s; best trial {result.best_trial} val_acc "
          f"{result.best_value:.4f} (seed 0, chosen on validation)")  # fmt: skip
    for key in ("val_acc", "test_acc"):
        print(
            f"{key} over seeds {args.seeds}: default {summary(rows, 'default', key)}, tuned {summary(rows, 'tuned', key)}"
        )
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
