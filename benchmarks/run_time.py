"""Where a whole `zoo finetune` run's wall time goes, end to end (issue 66): the command as a user
types it, with its defaults, timed from the process's start to its exit, beside the split its
card states (`zoo.training.finetune.card.WallClock`: training steps, validation, per-epoch
checkpoints/logs/curves, before the epochs, after them). Four runs:

- ``molecules``: ``gin3`` on FreeSolv's 642 hydration free energies (RDKit's data, zoo's CSV);
  ``molecules-2k``: on 2,000 NCI molecules' TPSA;
- ``images``: ``resnet20.fmnist`` on 2,000 Fashion-MNIST training images (200 per class, new
  class names so the head is fresh), 500 more to validate; ``images-20k``: 20,000 and 2,000.

    .venv/bin/python benchmarks/run_time.py --csv results/run_time/NAME.csv

Each row is written to ``--csv`` with the machine's line printed first; the share of the wall
time in training steps and validation is the figure the issue asks to be at least 80%.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from zoo.deploy.bench import machine_line
from zoo.training.data.builtin import FASHION_MNIST_CLASSES, load_fashion_mnist
from zoo.training.data.molecules.molecule_sets import write_csv

ZOO = [str(Path(sys.executable).parent / "zoo")]  # the console script, as a user runs it
PARTS = ("training steps", "validation", "per-epoch checkpoints, logs and curves", "before the epochs", "after them")


def image_folders(root: Path, train_per_class: int = 200, val_per_class: int = 50) -> tuple[Path, Path]:
    """Fashion-MNIST training images as class folders named anew (``c0`` ... ``c9``)."""
    images, labels = (t.numpy() for t in load_fashion_mnist("train"))
    rng = np.random.default_rng(0)
    for split, count, offset in (("train", train_per_class, 0), ("val", val_per_class, train_per_class)):
        for label in range(len(FASHION_MNIST_CLASSES)):
            chosen = rng.permutation(np.flatnonzero(labels == label))[offset : offset + count]
            folder = root / split / f"c{label}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in chosen:
                Image.fromarray(images[i]).save(folder / f"{i}.png")
    return root / "train", root / "val"


CASES = ("molecules", "images", "molecules-2k", "images-20k")


def case(name: str, work: Path) -> list[str]:
    """The command line of case ``name`` (its data written under ``work``)."""
    if name.startswith("molecules"):
        dataset = "nci-tpsa" if name == "molecules-2k" else "freesolv"
        return ["gin3", "--data", str(write_csv(dataset, work / f"{dataset}.csv"))]
    train, val = image_folders(work / name, *((2000, 200) if name == "images-20k" else (200, 50)))
    return ["resnet20.fmnist", "--data", str(train), "--val-data", str(val)]


def timed_run(argv: list[str], out: Path) -> dict[str, float]:
    """The run's process time and the parts of its card's wall-time line, in seconds."""
    start = time.perf_counter()
    subprocess.run([*ZOO, "finetune", *argv, "--out", str(out), "--no-progress"], check=True)
    row: dict[str, float] = {"process_s": time.perf_counter() - start}
    line = next(x for x in (out / "README.md").read_text().splitlines() if x.startswith("- wall time: "))
    row["run_s"] = float(re.match(r"- wall time: ([\d.]+) s", line).group(1))  # type: ignore[union-attr]
    for part in PARTS:
        found = re.search(re.escape(part) + r" ([\d.]+) s", line)
        row[part] = float(found.group(1)) if found else 0.0
    row["steps_and_validation"] = (row["training steps"] + row["validation"]) / row["process_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for name in args.cases:
            row = {"case": name, **timed_run(case(name, work), work / f"run-{name}")}
            rows.append(row)
            print(
                f"{name}: {row['process_s']:.1f} s in all, {row['steps_and_validation']:.0%} in training steps and "
                f"validation; " + ", ".join(f"{part} {row[part]:.1f} s" for part in PARTS),
                flush=True,
            )
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: f"{v:.3f}" if isinstance(v, float) else v for k, v in row.items()} for row in rows)


if __name__ == "__main__":
    main()
