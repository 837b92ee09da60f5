"""zoo's graph models against chemprop's D-MPNN on the same split files, each through its own command line.

For each molecule set of `zoo.training.data.molecules.molecule_sets` (the RDKit wheel's), the fixed
Bemis–Murcko scaffold split that the cards use (`benchmark(name)`: train / validation / test,
80 / 10 / 10) is written as ``train.csv``, ``val.csv`` and ``test.csv`` (``smiles,LABEL``,
RDKit's canonical SMILES) under ``--out/SET/``. Then, per seed:

- chemprop (2.x, in its own environment; never a dependency of zoo):
  ``chemprop train --data-path train.csv val.csv test.csv --task-type regression
  --pytorch-seed S --data-seed S --num-workers W --accelerator cpu --devices 1 --output-dir DIR``
  (its default epochs, 50, unless ``--chemprop-epochs``; three files are taken as train, val
  and test as they are, no split), then ``chemprop predict --test-path test.csv --model-paths
  DIR/model_0/best.pt --preds-path preds.csv --drop-extra-columns``;
- each of zoo's models (``--zoo-models``, default gin3 gin_sum gin_sopool), as a user would:
  ``zoo finetune ARCH --data train.csv --val-data val.csv --out DIR --seed S`` with zoo's
  defaults, whatever they are when this runs (no other flags), then the saved folder's
  predictions on test.csv (``zoo eval`` only re-measures registered cards, so: `zoo.load(DIR)`
  and `predict_molecules` over the test SMILES in batches).

A classification set (class labels: ``solubility-class``) is written with class indices
0..K-1, trained as ``chemprop train --task-type multiclass --multiclass-num-classes K`` and
``zoo finetune ... --task classification``, and scored by test accuracy and macro F1 of the most
probable class. Test MAE, RMSE and R² are computed here, for both, from the predictions and the labels of
test.csv (`zoo.training.loop.meter.regression_metrics`'s formulas). The wall time of a run is
that of its training command (start-up, featurisation, training and whatever the command does
after it: zoo's post-training report included), with its CPU time beside it (user + system, all
threads: less moved by other jobs on a shared machine); prediction time is in the CSV. Printed: the
machine, then one Markdown table per set (mean ± std over the seeds); ``--out/results.csv``
has one row per run. Runs go one after another (``--jobs N``: N at a time, with ``--threads 1``
one a core; each run's CPU time is its own); ``--limit N`` trains on a seeded random N of
the training molecules (a small-data curve, or with ``--sets`` and ``--seeds`` a short smoke
run); ``--split-seed`` takes another scaffold split than
the cards' (the one `benchmarks/molecule_sweep.py --split-seeds` trains on).

    python3 -m venv /work/cp-env && /work/cp-env/bin/pip install chemprop   # once, outside the repository
    .venv/bin/python benchmarks/molecules_vs_chemprop.py [--chemprop /work/cp-env/bin/chemprop]
        [--sets nci-tpsa chembl2321810] [--seeds 0 1 2] [--split-seed 0] [--limit N] [--chemprop-epochs N]
        [--zoo-models gin3 gin_sum gin_sopool | --zoo-models] [--no-chemprop] [--threads 1] [--jobs 2]
        [--out runs/molecules_vs_chemprop]

``--zoo-models`` with no names runs chemprop only; ``--no-chemprop`` runs zoo's side only.
``--threads N`` sets OMP_NUM_THREADS (and MKL's) for every command, chemprop's and zoo's alike:
on a machine busy with other jobs, 1 (chemprop's epochs on 2 shared cores: about 19 s with 2
threads waiting for each other, about 5 s with 1).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

import zoo
from zoo.bounds import SEED, count
from zoo.loading.smiles import MAX_PREDICT_SMILES, predict_molecules
from zoo.training.data.molecules.molecule_sets import SETS, benchmark, write_splits
from zoo.training.loop.meter import regression_metrics

ZOO_MODELS = ("gin3", "gin_sum", "gin_sopool")
CHEMPROP = "chemprop"
CHEMPROP_WARMUP_EPOCHS = 2  # chemprop's default --warmup-epochs; it refuses --epochs at or below it
LOG_TAIL = 40  # lines of a failed command's log shown


@dataclass
class Run:
    """One model, one seed, on one set: test metrics and seconds."""

    set: str
    model: str
    seed: int
    mae: float  # regression sets; nan on a classification set
    rmse: float
    r2: float
    accuracy: float  # classification sets (percent); nan on a regression set
    f1_macro: float
    train_s: float
    train_cpu_s: float
    predict_s: float
    n_train: int
    n_val: int
    n_test: int
    command: str


def read_table(path: Path) -> tuple[list[str], list[float]]:
    """The SMILES and the last column, as numbers, of a ``smiles,VALUE`` CSV."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file))[1:]
    return [row[0] for row in rows], [float(row[-1]) for row in rows]


def metrics(predicted: Sequence[float], truth: Sequence[float], classes: bool) -> dict[str, float]:
    """MAE, RMSE and R² of the predictions (zoo's `regression_metrics` over float64 sums), or for
    predicted class indices (``classes``) accuracy (percent) and macro F1; the others nan."""
    p, t = np.asarray(predicted, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if p.shape != t.shape:
        raise SystemExit(f"{len(p)} predictions for {len(t)} test molecules")
    nan = float("nan")
    if classes:
        from sklearn.metrics import f1_score

        scores = {"accuracy": 100.0 * float((p == t).mean()), "f1_macro": float(f1_score(t, p, average="macro"))}
        return scores | {"mae": nan, "rmse": nan, "r2": nan}
    error = p - t
    sums = {"sum/count": len(t), "sum/abs_error": float(np.abs(error).sum()),
            "sum/squared_error": float(np.square(error).sum()), "sum/target": float(t.sum()),
            "sum/target_squared": float(np.square(t).sum())}  # fmt: skip
    return regression_metrics(sums) | {"accuracy": nan, "f1_macro": nan}


THREADS: int | None = None  # --threads: OMP/MKL threads of each command (None: their own default)


def timed(command: list[str], log: Path, cwd: Path) -> tuple[float, float]:
    """Run ``command`` with its output in ``log``; the wall and CPU seconds (user + system, all
    threads) it took. A failure stops the benchmark with the end of the log."""
    env = dict(os.environ)
    if THREADS is not None:
        env |= {"OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS)}
    start = time.perf_counter()
    with open(log, "w") as file:
        process = subprocess.Popen(command, stdout=file, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        _, status, usage = os.wait4(process.pid, 0)  # this command's own CPU time, whatever runs beside it
        process.returncode = code = os.waitstatus_to_exitcode(status)
    seconds, cpu = time.perf_counter() - start, usage.ru_utime + usage.ru_stime
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
        raise SystemExit(f"{tail}\n\nfailed (exit {code}): {' '.join(command)}\nlog: {log}")
    return seconds, cpu


def chemprop_classes(path: Path) -> list[float]:
    """The predicted class of each row of chemprop's multiclass predictions: the argmax of its
    ``LABEL_prob`` column (comma-separated class probabilities)."""
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    column = next(name for name in rows[0] if name.endswith("_prob"))
    return [float(np.argmax([float(p) for p in row[column].split(",")])) for row in rows]


def run_chemprop(
    chemprop: str, paths: dict[str, Path], folder: Path, seed: int, epochs: int | None, workers: int, classes: int
) -> tuple[list[float], tuple[float, float], float, str]:
    """chemprop train on the three files (``classes`` > 0: multiclass with that many), then chemprop
    predict on test.csv: the test predictions, wall and CPU seconds of training, seconds of
    predicting, the training command."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    common = ["--num-workers", str(workers), "--accelerator", "cpu", "--devices", "1"]
    train = [chemprop, "train", "--data-path", str(paths["train"]), str(paths["val"]), str(paths["test"]),
             *(["--task-type", "multiclass", "--multiclass-num-classes", str(classes)] if classes else
               ["--task-type", "regression"]), "--pytorch-seed", str(seed), "--data-seed", str(seed), *common,
             "--output-dir", str(folder / "model")]  # fmt: skip
    if epochs is not None:
        train += ["--epochs", str(epochs)]
    trained = timed(train, folder / "train.log", folder)
    models = sorted((folder / "model").rglob("best.pt"))
    if len(models) != 1:
        raise SystemExit(f"chemprop train left {len(models)} best.pt files under {folder / 'model'}; expected one")
    preds = folder / "preds.csv"
    predict = [chemprop, "predict", "--test-path", str(paths["test"]), "--model-paths", str(models[0]),
               "--preds-path", str(preds), "--drop-extra-columns", *common]  # fmt: skip
    predict_s, _ = timed(predict, folder / "predict.log", folder)
    predicted = chemprop_classes(preds) if classes else read_table(preds)[1]
    return predicted, trained, predict_s, " ".join(train)


def run_zoo(
    zoo_cli: str, arch: str, paths: dict[str, Path], folder: Path, seed: int, classes: int
) -> tuple[list[float], tuple[float, float], float, str]:
    """``zoo finetune`` with its defaults (and ``--task classification`` for class indices, as a
    user would say), then the saved model's predictions on test.csv (the most probable class)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    train = [zoo_cli, "finetune", arch, "--data", str(paths["train"]), "--val-data", str(paths["val"]),
             "--out", str(folder / "model"), "--seed", str(seed)]  # fmt: skip
    train += ["--task", "classification"] if classes else []
    trained = timed(train, folder / "train.log", folder)
    start = time.perf_counter()
    model = zoo.load(str(folder / "model"))
    smiles, _ = read_table(paths["test"])
    answers = [
        value
        for at in range(0, len(smiles), MAX_PREDICT_SMILES)
        for value in predict_molecules(model, smiles[at : at + MAX_PREDICT_SMILES], str(paths["test"]))
    ]  # values, or {class name: probability} with the class indices as names
    predicted = [float(max(a, key=a.get)) if classes else float(a) for a in answers]
    return predicted, trained, time.perf_counter() - start, " ".join(train)


def scored(
    name: str,
    model: str,
    seed: int,
    done: tuple[list[float], tuple[float, float], float, str],
    sizes: dict[str, int],
    truth: Sequence[float],
    classes: int,
) -> Run:
    """The `Run` of ``run_chemprop`` / ``run_zoo``'s answer: its test metrics and seconds."""
    predicted, (train_s, train_cpu_s), predict_s, command = done
    scores = metrics(predicted, truth, bool(classes))
    return Run(
        name, model, seed, scores["mae"], scores["rmse"], scores["r2"], scores["accuracy"], scores["f1_macro"],
        train_s, train_cpu_s, predict_s,
        sizes["train"], sizes["val"], sizes["test"], command,
    )  # fmt: skip


def find_chemprop(given: str | None) -> str | None:
    """The chemprop executable: ``given``, else chemprop on PATH."""
    if given is not None:
        return given if Path(given).is_file() and os.access(given, os.X_OK) else None
    return shutil.which(CHEMPROP)


def find_zoo() -> str:
    """zoo's command line: beside this interpreter (the project's .venv), else on PATH."""
    beside = Path(sys.executable).parent / "zoo"
    found = str(beside) if beside.is_file() else shutil.which("zoo")
    if found is None:
        raise SystemExit("no zoo command beside this Python or on PATH; run with the project's .venv/bin/python")
    return found


def chemprop_versions(chemprop: str) -> str:
    """chemprop's version and its environment's torch version (from the script's interpreter)."""
    answer = subprocess.run([chemprop, "--version"], capture_output=True, text=True)
    version = (answer.stdout.strip() or answer.stderr.strip()).splitlines()[-1:] or ["chemprop (version unknown)"]
    torch_version = "unknown"
    first = Path(chemprop).read_text(errors="replace").splitlines()[:1]
    if first and first[0].startswith("#!"):
        python = first[0][2:].strip().split()[0]
        probe = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        torch_version = probe.stdout.strip() or torch_version
    return f"{version[0]}, its torch {torch_version}"


def machine() -> str:
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = "unknown CPU"
    threads = f"OMP_NUM_THREADS={THREADS} per command" if THREADS else f"{torch.get_num_threads()} torch threads"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPUs, {threads}, zoo's torch {torch.__version__}; load average {load}"


def cell(values: Sequence[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {spread:.3f}"


def table(runs: Sequence[Run]) -> list[str]:
    """Markdown rows: mean ± std over the seeds per model, wall and CPU seconds of training per run."""
    classes = bool(runs) and not math.isnan(runs[0].accuracy)
    names = "test accuracy (%) | test macro F1" if classes else "test MAE | test RMSE | test R²"
    lines = [
        f"| model | {names} | wall time per run | CPU time per run | seeds |",
        "| --- " * (6 if classes else 7) + "|",
    ]
    for model in dict.fromkeys(run.model for run in runs):
        mine = [run for run in runs if run.model == model]
        r2 = [run.r2 for run in mine if not math.isnan(run.r2)]
        scores = (
            f"{cell([r.accuracy for r in mine])} | {cell([r.f1_macro for r in mine])}"
            if classes
            else f"{cell([r.mae for r in mine])} | {cell([r.rmse for r in mine])} | {cell(r2) if r2 else 'nan'}"
        )
        lines.append(
            f"| {model} | {scores} | {statistics.mean(r.train_s for r in mine):.0f} s | "
            f"{statistics.mean(r.train_cpu_s for r in mine):.0f} s | {len(mine)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--seeds", nargs="+", type=SEED.parse, default=[0, 1, 2])
    parser.add_argument(
        "--limit", type=count(1).parse, default=None, help="a seeded random N of the training molecules"
    )
    parser.add_argument("--split-seed", type=SEED.parse, default=0, help="the scaffold split (the cards': 0)")
    parser.add_argument("--chemprop", default=None, help="chemprop's executable (default: chemprop on PATH)")
    parser.add_argument(
        "--chemprop-epochs", type=count(1, 10**5).parse, default=None, help="default: chemprop's own (50)"
    )
    parser.add_argument(
        "--chemprop-workers", type=count(0, 256).parse, default=0, help="chemprop's --num-workers (0: in-process)"
    )
    parser.add_argument("--no-chemprop", action="store_true", help="zoo's models only")
    parser.add_argument("--zoo-models", nargs="*", default=list(ZOO_MODELS), help="none: chemprop only")
    parser.add_argument(
        "--threads",
        type=count(1, 1024).parse,
        default=None,
        help="OMP_NUM_THREADS of every command (default: theirs; 1 on a busy machine)",
    )
    parser.add_argument(
        "--jobs", type=count(1, 64).parse, default=1, help="commands run at a time (with --threads 1: one a core)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/molecules_vs_chemprop"))
    args = parser.parse_args()
    global THREADS
    THREADS = args.threads
    if args.chemprop_epochs is not None and args.chemprop_epochs <= CHEMPROP_WARMUP_EPOCHS:
        parser.error(f"--chemprop-epochs must be above chemprop's {CHEMPROP_WARMUP_EPOCHS} warm-up epochs")
    if args.no_chemprop and not args.zoo_models:
        parser.error("nothing to run: --no-chemprop and no --zoo-models")

    chemprop = None
    if not args.no_chemprop:
        chemprop = find_chemprop(args.chemprop)
        if chemprop is None:
            where = args.chemprop or "on PATH"
            print(
                f"chemprop not found ({where}); install it in its own environment "
                "(python3 -m venv /work/cp-env && /work/cp-env/bin/pip install chemprop) and pass "
                "--chemprop /work/cp-env/bin/chemprop, or use --no-chemprop",
                file=sys.stderr,
            )
            sys.exit(2)
    zoo_cli = find_zoo() if args.zoo_models else ""
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    print(f"command: {Path(sys.executable).name} {' '.join(sys.argv)}")
    print(f"machine: {machine()}")
    if chemprop is not None:
        epochs = args.chemprop_epochs or "its default"
        print(
            f"chemprop: {chemprop_versions(chemprop)} ({chemprop}), epochs {epochs}, --num-workers {args.chemprop_workers}"
        )
    if args.zoo_models:
        print(f"zoo: {zoo_cli}, finetune with its defaults")
    print(
        f"seeds {' '.join(map(str, args.seeds))}; scaffold split {args.split_seed}; training molecules: "
        f"{args.limit or 'all'}; out {out}",
        flush=True,
    )

    runs: list[Run] = []
    results, lock = out / "results.csv", threading.Lock()
    for name in args.sets:
        source = benchmark(name)[0]
        classes = source.num_classes if source.target is None else 0
        paths = write_splits(name, out / name, args.limit, args.split_seed)
        sizes = {split: len(read_table(path)[0]) for split, path in paths.items()}
        models = ([CHEMPROP] if chemprop is not None else []) + list(args.zoo_models)

        def one(model: str, seed: int, name: str = name, paths: dict = paths, classes: int = classes) -> Run:
            folder = out / name / model.replace("/", "_") / f"seed{seed}"
            if model == CHEMPROP:
                assert chemprop is not None  # internal: models holds chemprop only then
                done = run_chemprop(chemprop, paths, folder, seed, args.chemprop_epochs, args.chemprop_workers, classes)
            else:
                done = run_zoo(zoo_cli, model, paths, folder, seed, classes)
            test = read_table(paths["test"])[1]
            run = scored(name, model, seed, done, {k: len(read_table(v)[0]) for k, v in paths.items()}, test, classes)
            (folder / "result.json").write_text(json.dumps(asdict(run), indent=2) + "\n")
            scores = f"accuracy {run.accuracy:.2f}% macro F1 {run.f1_macro:.3f}" if classes else (
                f"MAE {run.mae:.3f} RMSE {run.rmse:.3f} R² {run.r2:.3f}")  # fmt: skip
            with lock:
                runs.append(run)
                print(
                    f"{name} {model} seed {seed}: {scores} "
                    f"({run.train_s:.0f} s training, {run.train_cpu_s:.0f} CPU s, {run.predict_s:.1f} s predicting)",
                    flush=True,
                )
                with open(results, "w", newline="") as file:  # rewritten after each run: a stop keeps what ran
                    writer = csv.DictWriter(file, fieldnames=list(asdict(run)))
                    writer.writeheader()
                    writer.writerows(asdict(r) for r in runs)
            return run

        with ThreadPoolExecutor(args.jobs) as pool:  # --jobs commands at a time, each its own process
            list(pool.map(lambda task: one(*task), [(model, seed) for model in models for seed in args.seeds]))
        mine = [run for run in runs if run.set == name]
        print(
            f"\n### {name}: {SETS[name].label}, scaffold split: {sizes['train']} train, {sizes['val']} validation, "
            f"{sizes['test']} test molecules\n"
        )
        print("\n".join(table(mine)) + "\n", flush=True)
    print(f"per run: {results}")


if __name__ == "__main__":
    main()
