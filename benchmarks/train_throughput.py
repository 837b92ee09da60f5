"""Training speed and accuracy side by side in one process: the PyTorch tutorial loop,
PyTorch Lightning (``32-true``, ``bf16-mixed``), zoo's Trainer with its default
(``precision="auto"``, its probe counted in its time) and with each fixed setting; the CIFAR
ResNet-20 (1 input channel) on Fashion-MNIST.

Every variant starts from the same weights with the same SGD (lr, momentum, no weight decay, no
schedule) on the same normalised tensors. Speed: ``--repeats`` rounds, each variant training a
run of ``--steps`` optimizer steps in turn (start-up included), median images/s and the ratio
to the tutorial loop. zoo's default is timed twice: starting each run with an empty
``$ZOO_HOME``, so it measures anew every time, as a first run on a machine does, its probe
counted; and with the choice an earlier run remembered, as every later run. Accuracy: each variant trains ``--epochs`` epochs on
``--subset`` training images for each of ``--seeds`` seeds (initial weights and data order
from the seed), scored on ``--test-subset`` test images, mean ± std. The machine goes in the
first line and into the CSV (``--csv``), which docs/results.md renders.

    .venv/bin/python benchmarks/train_throughput.py [--steps 300] [--repeats 3] [--epochs 2] [--seeds 3] [--csv results/x.csv]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import math
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

import zoo
from zoo.deploy.bench import machine_line
from zoo.training.data.builtin import load_fashion_mnist
from zoo.training.loop.loaders import EpochSampler
from zoo.training.loop.trainer import TrainConfig, Trainer

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set statistics
TUTORIAL = "tutorial loop, fp32"
REMEMBERED = "zoo default (auto, remembered)"
AFTER_COMPILE = "zoo default (auto, after a compiled run)"
CLI = "zoo finetune, command line (auto)"
CLI_BY_HAND = "zoo finetune, command line, bf16 + channels_last"
VAL_FRACTION = 0.1  # zoo finetune's default hold-out
Run = Callable[[nn.Module, TensorDataset, argparse.Namespace, int | None, int, int], dict[str, str]]


def fashion_mnist(split: str, limit: int) -> TensorDataset:
    images, labels = load_fashion_mnist(split)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:limit]
    x = (images[order].unsqueeze(1).float() / 255 - MEAN) / STD
    return TensorDataset(x, labels[order])


def tutorial_loop(model: nn.Module, data: TensorDataset, args, steps: int | None, epochs: int, seed: int) -> dict:
    """The PyTorch tutorial's loop ("Optimizing Model Parameters"), with momentum, reading the
    samples in the Trainer's seeded order."""
    sampler = EpochSampler(data, seed=seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True, pin_memory=_cuda(args))
    model.to(args.device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    done = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if steps is not None and done == steps:
                return {}
    return {}


def lightning_run(precision: str) -> Run:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self, model: nn.Module, lr: float, momentum: float) -> None:
            super().__init__()
            self.model, self.lr, self.momentum = model.train(), lr, momentum  # zoo.load gives eval mode

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)

    def run(model: nn.Module, data: TensorDataset, args, steps: int | None, epochs: int, seed: int) -> dict:
        sampler = EpochSampler(data, seed=seed)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True, pin_memory=_cuda(args))
        trainer = L.Trainer(
            accelerator="gpu" if _cuda(args) else "cpu",
            devices=1,
            precision=precision,
            max_steps=steps or -1,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(Classifier(model, args.lr, args.momentum), loader)
        return {}

    return run


def zoo_run(
    precision: str,
    channels_last: bool | None = None,
    compile: bool | None = None,
    home: str | None = None,
    out_dir: str | None = None,
) -> Run:
    """zoo's Trainer; auto measures anew each run, or with ``home`` finds what an earlier run
    remembered there (a user's second run on the machine). With ``out_dir``: profiled there."""

    def run(model: nn.Module, data: TensorDataset, args, steps: int | None, epochs: int, seed: int) -> dict:
        config = TrainConfig(
            out_dir=out_dir,
            profile=out_dir is not None,
            epochs=epochs,
            max_steps=steps,
            batch_size=args.batch_size,
            optimizer="sgd",
            lr=args.lr,
            momentum=args.momentum,
            weight_decay=0.0,
            scheduler="none",
            precision=precision,
            channels_last=channels_last,
            compile=compile,
            seed=seed,
            device=args.device,
            progress=False,
            tensorboard=False,
            plot=False,
        )
        with zoo_home(home):  # without one, auto measures anew: nothing remembered
            trainer = Trainer(model.train(), config)
            trainer.fit(data)
        return {"chose": trainer.setting.name} if precision == "auto" else {}

    return run


@contextlib.contextmanager
def zoo_home(home: str | None) -> Iterator[str]:
    """``$ZOO_HOME`` set to ``home`` (None: a fresh empty folder, removed after) while inside, then
    as it was."""
    before = os.environ.get("ZOO_HOME")
    with tempfile.TemporaryDirectory() as fresh:
        os.environ["ZOO_HOME"] = home or fresh
        try:
            yield os.environ["ZOO_HOME"]
        finally:
            if before is None:
                del os.environ["ZOO_HOME"]
            else:
                os.environ["ZOO_HOME"] = before


def cli_run(*flags: str) -> Run:
    """``zoo finetune resnet20 --scratch --data fashion-mnist [flags]`` in this process, as a user
    types it, with an empty ``$ZOO_HOME`` (auto measures anew): its own data path (the built-in
    set, the hold-out and its evaluation, the run's files) with enough images for ``steps`` in one
    epoch; without the post-training (evaluation, exports, int8), which is not per step. ``flags``
    fix a setting by hand (``--precision bf16 --channels-last``): the same path's ceiling."""

    def run(model: nn.Module, data: TensorDataset, args, steps: int | None, epochs: int, seed: int) -> dict:
        from zoo.cli.parser import main as zoo_main

        limit = math.ceil((steps or 1) * args.batch_size / (1 - VAL_FRACTION)) + args.batch_size
        options = {"--limit": limit, "--max-steps": steps, "--batch-size": args.batch_size, "--optimizer": "sgd"}
        options |= {"--lr": args.lr, "--momentum": args.momentum, "--weight-decay": 0, "--scheduler": "none"}
        options |= {"--seed": seed, "--device": args.device, "--val-fraction": VAL_FRACTION}
        with zoo_home(None) as home:
            out = Path(home) / "run"
            argv = ["finetune", "resnet20", "--scratch", "--data", "fashion-mnist", "--out", str(out), *flags]
            argv += [str(v) for pair in options.items() for v in pair]
            code = zoo_main(argv + ["--no-post-training", "--no-tensorboard", "--no-progress"])
            found = re.search(r"precision auto: chose (\S+)", (out / "train.log").read_text()) if code == 0 else None
        if code != 0:
            raise SystemExit(f"zoo finetune exited {code}")
        if found or "--precision" in flags:  # a precision set by hand: nothing chosen
            return {"chose": found.group(1)} if found else {}
        return {"chose": "?"}  # auto that did not say what it chose: shown, not hidden

    return run


def _cuda(args: argparse.Namespace) -> bool:
    return torch.device(args.device).type == "cuda"


@torch.no_grad()
def accuracy(model: nn.Module, data: TensorDataset, device: str) -> float:
    model.eval().to(device=device, memory_format=torch.contiguous_format)
    batches = DataLoader(data, batch_size=500)
    correct = sum(int((model(x.to(device)).argmax(1).cpu() == y).sum()) for x, y in batches)
    return correct / len(data)


def fresh_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)


def speed_data(args: argparse.Namespace) -> TensorDataset:
    """``--steps`` batches of training images, tiled where the machine holds fewer (the GPU
    machine is given part of Fashion-MNIST: speed does not depend on which images)."""
    data = fashion_mnist("train", args.steps * args.batch_size)
    reps = -(-args.steps * args.batch_size // len(data))
    return TensorDataset(*(t.repeat(reps, *[1] * (t.dim() - 1)) for t in data.tensors)) if reps > 1 else data


def throughput(variants: dict[str, Run], args: argparse.Namespace) -> dict[str, dict]:
    """Interleaved timed runs of every variant; median images/s and what auto chose."""
    data = speed_data(args)
    initial = fresh_model(0)
    for run in variants.values():  # warm-up: imports, oneDNN primitives, the allocator
        run(copy.deepcopy(initial), data, args, 2, 1, 0)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    chose: dict[str, list[str]] = {name: [] for name in variants}
    with tqdm(total=args.repeats * len(variants), desc="throughput") as bar:
        for _ in range(args.repeats):
            for name, run in variants.items():
                start = time.perf_counter()
                extra = run(copy.deepcopy(initial), data, args, args.steps, 1, 0)
                if _cuda(args):
                    torch.cuda.synchronize()
                rates[name].append(args.steps * args.batch_size / (time.perf_counter() - start))
                chose[name] += [extra["chose"]] if "chose" in extra else []
                bar.update()
                tqdm.write(f"  {name:<36} {rates[name][-1]:8.0f} images/s  {extra.get('chose', '')}")
    return {name: {"rate": statistics.median(rates[name]), "chose": chose[name]} for name in variants}


def accuracies(variants: dict[str, Run], args: argparse.Namespace) -> dict[str, list[float]]:
    train, test = fashion_mnist("train", args.subset), fashion_mnist("test", args.test_subset)
    scores: dict[str, list[float]] = {name: [] for name in variants}
    with tqdm(total=args.seeds * len(variants), desc="accuracy") as bar:
        for seed in range(args.seeds):
            for name, run in variants.items():
                model = fresh_model(seed)
                run(model, train, args, None, args.epochs, seed)
                scores[name].append(accuracy(model, test, args.device))
                bar.update()
    return scores


def machine(device: str = "cpu") -> str:
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (
            f"{props.name} ({props.total_memory / 2**30:.0f} GiB), torch {torch.__version__}, CUDA {torch.version.cuda}"
        )
    return machine_line()


def profile(args: argparse.Namespace, home: str) -> None:
    """The operators that bound a step of zoo's default (the setting remembered in ``home``),
    by their share of its time: `TrainConfig.profile`'s own table."""
    with tempfile.TemporaryDirectory() as out:
        zoo_run("auto", home=home, out_dir=out)(fresh_model(0), speed_data(args), args, 8, 1, 0)
        rows = list(csv.DictReader((Path(out) / "profile" / "top_ops-rank0.csv").open()))
    print("where a step of zoo's default goes (torch.profiler, 3 steps, self time):")
    for row in rows[:10]:
        print(f"  {row['op']:<48} {row['share']:>6}  {row['ms_per_step']:>9} ms/step  {row['calls_per_step']:>6} calls")


def summary(speed: dict[str, dict]) -> list[str]:
    """zoo's default (remembered; and after a compiled run) against the fastest setting fixed by
    hand and Lightning's fastest."""
    rate = {name: value["rate"] for name, value in speed.items()}
    fixed = {name: r for name, r in rate.items() if name.startswith("zoo ") and "default" not in name}
    lightning = {name: r for name, r in rate.items() if name.startswith("Lightning")}
    lines = []
    for default in (d for d in (REMEMBERED, AFTER_COMPILE) if d in rate):
        for label, group in (("the fastest setting fixed by hand", fixed), ("Lightning's fastest", lightning)):
            if group:
                best = max(group, key=group.__getitem__)
                lines.append(f"{default} / {label} ({best}): {rate[default] / group[best]:.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per timed run (0: skip speed)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="epochs for the accuracy comparison (0: skip it)")
    parser.add_argument("--seeds", type=int, default=3)
    # 20000 images, batch 128: 312 steps in 2 epochs, enough for auto to measure (under 160 it keeps fp32)
    parser.add_argument("--subset", type=int, default=20000, help="training images for the accuracy comparison")
    parser.add_argument("--test-subset", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compile", action="store_true", help="also the fixed settings with torch.compile")
    parser.add_argument("--csv", type=Path, help="write the table here")
    parser.add_argument("--profile", action="store_true", help="also: the ops that bound a step of zoo's default")
    parser.add_argument("--only", nargs="+", help="time only the rows whose names hold one of these words")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (the GPU's candidates: fp16, TF32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cuda = _cuda(args)
    bf16 = torch.cuda.is_bf16_supported() if cuda else torch.ops.mkldnn._is_mkldnn_bf16_supported()
    variants: dict[str, Run] = {
        TUTORIAL: tutorial_loop,
        "Lightning 32-true": lightning_run("32-true"),
        **({"Lightning bf16-mixed": lightning_run("bf16-mixed")} if bf16 else {}),
        **({"Lightning 16-mixed": lightning_run("16-mixed")} if cuda else {}),
        "zoo default (auto, probe counted)": zoo_run("auto"),
        CLI: cli_run(),
        **({CLI_BY_HAND: cli_run("--precision", "bf16", "--channels-last")} if bf16 else {}),
        "zoo fp32": zoo_run("fp32"),
        "zoo fp32 + channels_last": zoo_run("fp32", True),
        **({"zoo bf16 + channels_last": zoo_run("bf16", True)} if bf16 else {}),
        **({"zoo fp16 + channels_last": zoo_run("fp16", True)} if cuda else {}),
    }
    remembered_home = tempfile.mkdtemp()
    if args.steps:  # one run that measures and remembers, as a user's first run on the machine
        variants[REMEMBERED] = zoo_run("auto", home=remembered_home)
        variants[REMEMBERED](fresh_model(0), speed_data(args), args, args.steps, 1, 0)
    if args.compile:
        variants["zoo fp32 + compile"] = zoo_run("fp32", False, True)
        if bf16:
            variants["zoo bf16 + channels_last + compile"] = zoo_run("bf16", True, True)
        if cuda:  # compiled on a GPU: CUDA graphs ("reduce-overhead", training/loop/speed.py: compile_mode)
            variants["zoo fp16 + channels_last + compile"] = zoo_run("fp16", True, True)
        if args.steps:  # a run compiled by hand (its compile's cost kept), then the default once, which remembers
            compiled_home = tempfile.mkdtemp()
            zoo_run("bf16" if bf16 else "fp32", bf16, True, home=compiled_home)(
                fresh_model(0), speed_data(args), args, args.steps, 1, 0
            )
            variants[AFTER_COMPILE] = zoo_run("auto", home=compiled_home)
            variants[AFTER_COMPILE](fresh_model(0), speed_data(args), args, args.steps, 1, 0)
    print(f"resnet20 on Fashion-MNIST 28x28 gray, batch {args.batch_size}, SGD; {machine(args.device)}")
    if args.only:  # a subset, by name: more rounds of the rows a comparison needs
        variants = {name: run for name, run in variants.items() if any(word in name for word in args.only)}
    speed = throughput(variants, args) if args.steps else {}
    scores = (
        accuracies({k: v for k, v in variants.items() if k not in (REMEMBERED, AFTER_COMPILE, CLI, CLI_BY_HAND)}, args)
        if args.epochs
        else {}
    )
    rows = table(variants, speed, scores, args)
    for row in rows:
        print("  " + "  ".join(f"{v:>12}" if i else f"{v:<36}" for i, v in enumerate(row.values())))
    print("\n".join(summary(speed)))
    if args.profile and args.steps:
        profile(args, remembered_home)
    if args.csv:
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def table(variants: dict, speed: dict, scores: dict, args: argparse.Namespace) -> list[dict[str, str]]:
    base = speed.get(TUTORIAL, {}).get("rate")
    rows = []
    for name in variants:
        rate = speed.get(name, {}).get("rate")
        accs = scores.get(name, [])
        rows.append(
            {
                "variant": name,
                "images_per_s": f"{rate:.0f}" if rate else "",
                "x_tutorial": f"{rate / base:.2f}" if rate and base else "",
                f"top1_after_{args.epochs}_epochs": (
                    f"{100 * statistics.mean(accs):.2f} ± {100 * (statistics.stdev(accs) if len(accs) > 1 else 0):.2f}"
                    if accs
                    else ""
                ),
                "chose": ", ".join(sorted(set(speed.get(name, {}).get("chose", [])))),
            }
        )
    return rows


if __name__ == "__main__":
    main()
