"""Small-data transfer: `zoo finetune NAME --data TRAIN --val-data VAL` with its defaults, with
``--lr auto``, beside fastai's documented recipe and a plain PyTorch loop, on the same network,
weights and split files; test accuracy over seeds, and the machine named.

The suite (offline; each task's train/validation/test split is drawn anew from the seed):

- ``digits-5``, ``digits-10``, ``digits-50``: scikit-learn's handwritten digits as 28x28 image
  folders, 5, 10 or 50 per class to train, 20 per class to validate, up to 100 per class to
  test; from ``resnet20.fmnist`` (5, 10) and ``seresnet20.fmnist`` (50);
- ``fmnist-coarse``: Fashion-MNIST test images relabelled into 4 coarse classes (tops,
  trousers, footwear, bags), 10 per class, from ``resnet20.fmnist``;
- ``fmnist-inverted``: Fashion-MNIST test images with inverted pixels (a domain shift), the
  weights' own 10 classes (so zoo keeps the head), 10 per class, from ``mobilenet_v2_cifar.fmnist``;
- ``fmnist-rotated``: Fashion-MNIST test images turned a quarter, 5 per class, new names, from
  ``densenet_bc_40.fmnist``.

The arms:

- ``zoo``: the command line's defaults (``--seed S --no-progress --no-post-training`` only; the
  last skips exports, which change no accuracy); ``zoo-lr-auto``: the same with ``--lr auto``;
- ``plain``: the tutorial loop a user would write: the same weights with a new head
  (``reset_classifier``), Adam at 1e-3, 30 epochs of batch 16 over the whole network, the last
  epoch kept, the weights' own preprocessing, no augmentation;
- ``fastai``: fastai 2.8 in its own environment (``--fastai-python``, e.g. ``fa-env/bin/python``
  made by ``python3 -m venv fa-env && fa-env/bin/pip install -c constraints.txt fastai``): the
  same architecture module and weights, three layer groups (stem and first stage | the other
  stages | head), batch 16, ``learn.freeze(); learn.lr_find()`` (its ``valley``), then
  ``learn.fine_tune(20, valley)``; its best-of-run is the last epoch, as fastai keeps it.
- ``cand:FLAGS``: ``zoo finetune`` with extra flags, for choosing defaults on validation
  accuracy (``--arms 'cand:--head-epochs 0'``); ``budget:N``: the defaults with a budget of N
  optimizer steps instead of `TRANSFER_STEPS` (the epochs it gives on each task, as ``--epochs``).

Each row is appended to ``--csv`` as it finishes (a rerun skips the rows already there), then a
table of test accuracy (mean ± std over seeds), validation accuracy and wall time per run.

    .venv/bin/python benchmarks/transfer.py --fastai-python ../fa-env/bin/python --csv results/transfer/NAME.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
VAL_PER_CLASS, TEST_PER_CLASS = 20, 100
COARSE = {"tops": (0, 2, 3, 4, 6), "trousers": (1,), "footwear": (5, 7, 9), "bags": (8,)}
FIELDS = ("task", "arm", "seed", "val_acc", "test_acc", "seconds", "note")


@dataclass(frozen=True)
class Task:
    weights: str
    images: str  # digits, fmnist-coarse, fmnist-inverted, fmnist-rotated
    per_class: int


TASKS = {
    "digits-5": Task("resnet20.fmnist", "digits", 5),
    "digits-10": Task("resnet20.fmnist", "digits", 10),
    "digits-50": Task("seresnet20.fmnist", "digits", 50),
    "fmnist-coarse": Task("resnet20.fmnist", "fmnist-coarse", 10),
    "fmnist-inverted": Task("mobilenet_v2_cifar.fmnist", "fmnist-inverted", 10),
    "fmnist-rotated": Task("densenet_bc_40.fmnist", "fmnist-rotated", 5),
}


def _pool(kind: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """All images (uint8, N x 28 x 28), labels and class names of a task's kind."""
    if kind == "digits":
        from zoo.training.demo import digit_images

        images, labels = digit_images()
        return images, labels, [str(d) for d in range(10)]
    from zoo.store.weight_entries import load_categories
    from zoo.training.data.builtin import load_fashion_mnist

    images, labels = (t.numpy() for t in load_fashion_mnist("test"))
    names = [n.replace("/", "_") for n in load_categories("fashion-mnist")]  # folder names; zoo matches T-shirt/top
    if kind == "fmnist-coarse":
        coarse = {fine: i for i, members in enumerate(COARSE.values()) for fine in members}
        return images, np.array([coarse[int(y)] for y in labels]), list(COARSE)
    if kind == "fmnist-inverted":
        return 255 - images, labels, names
    return np.ascontiguousarray(np.rot90(images, 1, axes=(1, 2))), labels, [f"turned {n}" for n in names]


def write_task(task: Task, root: Path, seed: int) -> dict[str, Path]:
    """``root/{train,val,test}/<class>/*.png``, drawn per class with ``seed``."""
    images, labels, names = _pool(task.images)
    rng = np.random.default_rng(seed)
    counts = {"train": task.per_class, "val": VAL_PER_CLASS, "test": TEST_PER_CLASS}
    for label, name in enumerate(names):
        chosen = rng.permutation(np.flatnonzero(labels == label))
        start = 0
        for split, count in counts.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in chosen[start : start + count]:
                Image.fromarray(images[index], mode="L").save(folder / f"{index:05d}.png")
            start += count
    return {split: root / split for split in counts}


# ---------------------------------------------------------------------------------------------
# The arms


def run_zoo(task: Task, paths: dict[str, Path], seed: int, out: Path, flags: list[str]) -> tuple[float, float, str]:
    """``zoo finetune`` in this process; its best epoch's validation accuracy and the test accuracy."""
    from zoo.cli import main
    from zoo.training.scoring import score_file

    argv = ["finetune", task.weights, "--data", str(paths["train"]), "--val-data", str(paths["val"])]
    argv += ["--out", str(out), "--seed", str(seed), "--no-progress", "--no-post-training", *flags]
    if main(argv) != 0:
        raise RuntimeError(f"zoo {shlex.join(argv)} failed")
    metrics = json.loads((out / "metrics.json").read_text())
    card = (out / "README.md").read_text()
    note = "; ".join(line[2:] for line in card.splitlines() if line.startswith(("- lr auto", "- head:")))
    val = _best_val(metrics)
    return val, score_file(str(out), str(paths["test"]), progress=False)["accuracy"], note


def _best_val(metrics: dict[str, Any]) -> float:
    """The best epoch's validation accuracy of a run folder (metrics.json's best epoch)."""
    rows = metrics["history"]
    return float(next(r for r in rows if r["epoch"] == metrics["best_epoch"])["val_acc"])


def _folder_set(folder: Path, preprocess: Callable[[Image.Image], Any]) -> Any:
    from torchvision.datasets import ImageFolder

    return ImageFolder(str(folder), transform=preprocess, loader=lambda p: Image.open(p).convert("L"))


def run_plain(task: Task, paths: dict[str, Path], seed: int) -> tuple[float, float, str]:
    """The tutorial loop: Adam 1e-3, 30 epochs, batch 16, the whole network, the last epoch."""
    import torch
    from torch.utils.data import DataLoader

    import zoo

    torch.manual_seed(seed)
    model = zoo.load(task.weights)
    train = _folder_set(paths["train"], zoo.transforms(task.weights))
    model.reset_classifier(len(train.classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(train, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(seed))
    for _ in range(30):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    return (*(_accuracy(model, _folder_set(paths[s], zoo.transforms(task.weights))) for s in ("val", "test")), "")


def _accuracy(model: Any, dataset: Any) -> float:
    import torch
    from torch.utils.data import DataLoader

    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(dataset, batch_size=100):
            correct += int((model(x).argmax(1) == y).sum())
    return correct / len(dataset)


def run_fastai(task: Task, paths: dict[str, Path], seed: int, out: Path, python: str) -> tuple[float, float, str]:
    """fastai's recipe in its own environment (`fastai_main` below, run by ``python``)."""
    import torch
    from safetensors.torch import save_file

    import zoo

    model = zoo.load(task.weights)
    cfg = model.pretrained_cfg
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "weights.safetensors"))
    spec = {
        "module": type(model).__module__.removeprefix("zoo."),
        "builder": cfg["architecture"],
        "kwargs": cfg["model_kwargs"],
        "classifier": cfg["classifier"],
        "stages": [level["module"] for level in model.feature_info],
        "mean": cfg["preprocess"]["mean"],
        "std": cfg["preprocess"]["std"],
        "weights": str(out / "weights.safetensors"),
        "paths": {k: str(v) for k, v in paths.items()},
        "seed": seed,
        "threads": torch.get_num_threads(),
    }
    done = subprocess.run(
        [python, __file__, "--fastai-worker", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"fastai failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["val_acc"], result["test_acc"], f"lr_find valley {result['lr']:.3g}"


def fastai_main(spec: dict[str, Any]) -> None:
    """The fastai arm, in fastai's environment: the zoo architecture module from this
    repository, the weights without their head, lr_find's valley and fine_tune(20)."""
    import importlib

    import torch
    from fastai.vision.all import (
        CategoryBlock,
        DataBlock,
        ImageBlock,
        Learner,
        Normalize,
        PILImageBW,
        accuracy,
        get_image_files,
        parent_label,
        set_seed,
    )
    from safetensors.torch import load_file

    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(spec["threads"])
    set_seed(spec["seed"], reproducible=True)
    paths = {k: Path(v) for k, v in spec["paths"].items()}
    files = {split: get_image_files(paths[split]) for split in ("train", "val")}
    block = DataBlock(
        blocks=(ImageBlock(cls=PILImageBW), CategoryBlock),
        get_items=lambda _: files["train"] + files["val"],
        get_y=parent_label,
        splitter=lambda items: (list(range(len(files["train"]))), list(range(len(files["train"]), len(items)))),
        batch_tfms=Normalize.from_stats(spec["mean"], spec["std"]),
    )
    dls = block.dataloaders(paths["train"], bs=16, num_workers=0)
    builder = getattr(importlib.import_module(spec["module"]), spec["builder"])
    model = builder(**spec["kwargs"], num_classes=len(dls.vocab))
    state = {k: v for k, v in load_file(spec["weights"]).items() if not k.startswith(spec["classifier"] + ".")}
    model.load_state_dict(state, strict=False)

    def splitter(m: torch.nn.Module) -> list[list[torch.nn.Parameter]]:
        head = set(map(id, m.get_submodule(spec["classifier"]).parameters()))
        first = set(map(id, m.get_submodule(spec["stages"][0]).parameters()))
        later = {id(p) for s in spec["stages"][1:] for p in m.get_submodule(s).parameters()}
        groups: list[list[torch.nn.Parameter]] = [[], [], []]
        for p in m.parameters():  # the stem (before the first stage) goes with it
            groups[2 if id(p) in head else 1 if id(p) in later else 0].append(p)
        assert first <= {id(p) for p in groups[0]}
        return groups

    learn = Learner(dls, model, metrics=accuracy, splitter=splitter)
    with learn.no_bar(), learn.no_logging():
        learn.freeze()
        lr = learn.lr_find(show_plot=False).valley
        learn.fine_tune(20, lr)
    val_acc = float(learn.validate()[1])
    test_dl = dls.test_dl(get_image_files(paths["test"]), with_labels=True)
    preds, targets = learn.get_preds(dl=test_dl)
    print(json.dumps({"val_acc": val_acc, "test_acc": float((preds.argmax(1) == targets).float().mean()), "lr": lr}))


# ---------------------------------------------------------------------------------------------
# The runs


def run_one(job: tuple[str, str, int, str, int, str | None]) -> dict[str, Any]:
    """One task x arm x seed, in a fresh working folder; its row."""
    task_name, arm, seed, work, threads, fastai_python = job
    import torch

    torch.set_num_threads(threads)
    task = TASKS[task_name]
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        paths = write_task(task, Path(tmp) / "data", seed)
        out = Path(tmp) / "run"
        started = time.perf_counter()
        try:
            val, test, note = _run_arm(task, arm, paths, seed, out, fastai_python)
        except Exception as error:  # one failed run is a row saying why, not the end of the others
            val, test, note = float("nan"), float("nan"), f"failed: {str(error)[-300:]}"
        seconds = time.perf_counter() - started
    return {"task": task_name, "arm": arm, "seed": seed, "val_acc": val, "test_acc": test, "seconds": seconds,
            "note": note}  # fmt: skip


def _run_arm(
    task: Task, arm: str, paths: dict[str, Path], seed: int, out: Path, fastai_python: str | None
) -> tuple[float, float, str]:
    """The arm named ``arm`` on one task's split files."""
    if arm == "plain":
        return run_plain(task, paths, seed)
    if arm == "fastai":
        if fastai_python is None:
            raise RuntimeError("the fastai arm needs --fastai-python")
        return run_fastai(task, paths, seed, out, fastai_python)
    if arm.startswith("budget:"):  # the default recipe with another step budget: its epochs on this task
        from zoo.training.data.kinds import open_data
        from zoo.training.finetune import defaults

        train = sum(1 for _ in paths["train"].rglob("*.png"))
        batch, source = defaults.transfer_batch_size(train), open_data(paths["train"])
        epochs = defaults.data_defaults(source, train, batch, int(arm.removeprefix("budget:")))["epochs"]
        return run_zoo(task, paths, seed, out, ["--epochs", str(epochs)])
    flags = {"zoo": [], "zoo-lr-auto": ["--lr", "auto"]}.get(arm)
    return run_zoo(task, paths, seed, out, shlex.split(arm.removeprefix("cand:")) if flags is None else flags)


def machine(threads: int) -> str:
    """The CPU, its vector extensions that matter here, the threads and the load."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if "model name" in line), "?")
    caps = [c for c in ("avx512_bf16", "amx_bf16", "avx2") if f" {c}" in flags]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{model} ({', '.join(caps) or 'no AVX2'}), {threads} thread(s) per run, load {load:.1f}, {platform.python_version()}"


def summary(rows: list[dict[str, Any]]) -> str:
    """Per task and arm: test accuracy mean ± std, validation accuracy mean, seconds per run."""
    lines = ["| task | arm | seeds | test acc | val acc | s/run |", "|---|---|---|---|---|---|"]
    keys = sorted({(r["task"], r["arm"]) for r in rows}, key=lambda k: (list(TASKS).index(k[0]), k[1]))
    for task, arm in keys:
        mine = [r for r in rows if (r["task"], r["arm"]) == (task, arm)]
        test = [float(r["test_acc"]) * 100 for r in mine]
        spread = statistics.stdev(test) if len(test) > 1 else 0.0
        val = statistics.mean(float(r["val_acc"]) * 100 for r in mine)
        secs = statistics.median(float(r["seconds"]) for r in mine)
        lines.append(
            f"| {task} | {arm} | {len(mine)} | {statistics.mean(test):.1f} ± {spread:.1f} | {val:.1f} | {secs:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=["zoo", "zoo-lr-auto", "plain", "fastai"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--csv", type=Path, required=True, help="rows are appended here; a rerun skips those done")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each on --threads threads)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fastai-python", help="the python of an environment with fastai (the fastai arm)")
    parser.add_argument("--work", default=None, help="folder for the runs' temporary files")
    args = parser.parse_args()
    done = list(csv.DictReader(args.csv.open())) if args.csv.exists() else []
    have = {(r["task"], r["arm"], int(r["seed"])) for r in done}
    jobs = [(t, a, s, args.work, args.threads, args.fastai_python) for a in args.arms for t in args.tasks
            for s in args.seeds if (t, a, s) not in have]  # fmt: skip
    print(f"# {machine(args.threads)}; {len(jobs)} runs, {args.jobs} at once", flush=True)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    new = not args.csv.exists()
    with args.csv.open("a", newline="") as sink, ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        writer = csv.DictWriter(sink, FIELDS)
        if new:
            writer.writeheader()
        for row in pool.map(run_one, jobs):
            writer.writerow(row)
            sink.flush()
            done.append(row)
            print(f"{row['task']:<16} {row['arm']:<24} seed {row['seed']}: test {row['test_acc']:.4f} "
                  f"val {row['val_acc']:.4f} {row['seconds']:.0f} s {row['note']}", flush=True)  # fmt: skip
    print(summary([r for r in done if r["task"] in args.tasks and r["arm"] in args.arms]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fastai-worker":
        fastai_main(json.loads(sys.argv[2]))
    else:
        main()
