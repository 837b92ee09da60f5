"""``--lr auto`` against a grid of fixed learning rates: the validation result of `zoo finetune`
on three data sets the project makes offline, with the default learning rate times 0.1, 0.3, 1,
3 and 10, and with ``--lr auto`` (the range test of `zoo.training.loop.lr_finder`), one seed each.

- digits: scikit-learn's handwritten digits as an image folder, 10 per class for training and
  60 per class for validation (`zoo.training.demo.write_digits_folder`), ``resnet20.fmnist``
  fine-tuned with the demo's settings (30 epochs, batch 32, a warmup epoch, crop padding 2);
- stdlib lines: ``text,label`` rows, one line of a standard-library package's source each,
  labelled with its package (asyncio, email, json, unittest, xml), 80 rows per class to train
  and 40 to validate, ``moe_encoder`` from scratch (2 layers of 128, 10 epochs, 48 tokens a row);
- chembl2321810: RDKit's ChEMBL series as a SMILES CSV (`zoo.training.data.molecules.molecule_sets`),
  ``gin_sum`` from scratch with the molecule defaults and ``--epochs 15`` (its own scaffold split).

The machine goes in the first line, then one row per run and the summary table. Each run
trains in fp32 on ``--threads`` torch threads (default 1: on a shared 2-core machine two threads
are slower than one while another job runs).

    .venv/bin/python benchmarks/lr_finder.py [--sets digits stdlib chembl2321810] [--work DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import random
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo.training.data.builtin import stdlib_files
from zoo.training.data.molecules.molecule_sets import write_csv
from zoo.training.demo import write_digits_folder

DEFAULT_LR = 1e-3  # TrainConfig's, the demo's and the molecule defaults'
FACTORS = (0.1, 0.3, 1.0, 3.0, 10.0)
PACKAGES = ("asyncio", "email", "json", "unittest", "xml")
SMALL_ENCODER = {"hidden_size": 128, "num_layers": 2, "intermediate_size": 256}  # a run under a minute on a core


def write_stdlib_lines(root: Path, train: int = 80, val: int = 40, seed: int = 0) -> tuple[Path, Path]:
    """``train.csv`` and ``val.csv`` of ``text,label`` rows: source lines (20 to 200 characters,
    not comments) of the standard-library packages `PACKAGES`, labelled with the package."""
    rng = random.Random(seed)
    rows: dict[str, list[list[str]]] = {"train": [], "val": []}
    for package in PACKAGES:
        lines = sorted({
            line.strip()
            for path in stdlib_files() if f"/{package}/" in path.as_posix()
            for line in path.read_text(errors="replace").splitlines()
            if 20 <= len(line.strip()) <= 200 and not line.strip().startswith("#")
        })  # fmt: skip
        chosen = rng.sample(lines, train + val)
        rows["train"] += [[text, package] for text in chosen[:train]]
        rows["val"] += [[text, package] for text in chosen[train:]]
    paths = []
    for split, split_rows in rows.items():
        rng.shuffle(split_rows)
        path = root / f"{split}.csv"
        with open(path, "w", newline="") as file:
            csv.writer(file).writerows([["text", "label"], *split_rows])
        paths.append(path)
    return paths[0], paths[1]


def data_sets(work: Path) -> dict[str, dict[str, Any]]:
    """Each set's model, data, flags and the validation metric read (with whether higher is better)."""
    digits_train, digits_eval, _ = write_digits_folder(work / "digits", 10, 0, seed=0, val_per_class=60)
    text_train, text_val = write_stdlib_lines(work)
    molecules = write_csv("chembl2321810", work / "chembl2321810.csv")
    return {
        "digits": dict(
            name="resnet20.fmnist",
            data=digits_train,
            flags=dict(val_data=str(digits_eval), epochs=30, batch_size=32, warmup_epochs=1.0, crop_padding=2),
            metric=("val_acc", True),
        ),
        "stdlib": dict(
            name="moe_encoder",
            data=text_train,
            flags=dict(val_data=str(text_val), epochs=10, batch_size=32, max_length=48, model_kwargs=SMALL_ENCODER),
            metric=("val_acc", True),
        ),
        "chembl2321810": dict(name="gin_sum", data=molecules, flags=dict(epochs=15), metric=("val_rmse", False)),
    }


def run(spec: dict[str, Any], lr: float | str, out: Path) -> dict[str, Any]:
    """One `zoo.finetune` run: its validation metric (best epoch), the lr it trained with, times."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bare architectures train from scratch: said once above
        result = zoo.finetune(spec["name"], spec["data"], out, lr=lr, seed=0, progress=False, tensorboard=False,
                              post_training=False, overwrite=True, precision="fp32", num_workers=0, **spec["flags"])  # fmt: skip
    seconds = time.perf_counter() - started
    row = {"lr": lr, "value": result.metrics[spec["metric"][0]], "seconds": seconds, "sweep_s": 0.0, "steps": ""}
    if lr == "auto":
        line = next(line for line in (out / "README.md").read_text().splitlines() if line.startswith("- lr auto: "))
        row["lr"] = float(line.split()[3])
        row["sweep_s"] = float(re.search(r"([\d.]+) s; curve", line).group(1))
        row["steps"] = re.search(r"(\d+ of \d+) steps", line).group(1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["digits", "stdlib", "chembl2321810"])
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the data and runs (default: a temporary one)"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from molecule_speed import machine  # benchmarks/ is on sys.path when run as a script

    print(machine())
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        sets = data_sets(work)
        summary = []
        print("| data | lr | metric | value | run s | sweep s |\n| --- | ---: | --- | ---: | ---: | ---: |")
        for key in args.sets:
            spec, (metric, higher) = sets[key], sets[key]["metric"]
            rows = []
            for lr in [DEFAULT_LR * f for f in FACTORS] + ["auto"]:
                row = run(spec, lr, work / "runs" / f"{key}-{lr}")
                rows.append(row)
                shown = f"auto -> {row['lr']:.3g} ({row['steps']} steps)" if lr == "auto" else f"{lr:g}"
                print(f"| {key} | {shown} | {metric} | {row['value']:.4f} | {row['seconds']:.1f} | "
                      f"{row['sweep_s']:.1f} |", flush=True)  # fmt: skip
            summary.append(summarise(key, spec, metric, higher, rows))
        print(
            "\n| data | model | metric | default (1e-3) | best of grid | auto (lr found) | auto - best | sweep / run |"
        )
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        print("\n".join(summary))


def summarise(key: str, spec: dict[str, Any], metric: str, higher: bool, rows: list[dict[str, Any]]) -> str:
    """The summary row of one data set: the default, the best of the grid and auto side by side."""
    grid, auto = rows[:-1], rows[-1]
    best = max(grid, key=lambda r: r["value"] if higher else -r["value"])
    default = grid[FACTORS.index(1.0)]
    gap = auto["value"] - best["value"]
    return (
        f"| {key} | {spec['name']} | {metric} | {default['value']:.4f} | {best['value']:.4f} (lr {best['lr']:g}) | "
        f"{auto['value']:.4f} (lr {auto['lr']:.3g}) | {gap:+.4f} | {auto['sweep_s']:.1f} s / {auto['seconds']:.1f} s |"
    )


if __name__ == "__main__":
    main()
