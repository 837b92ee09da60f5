"""Training throughput and accuracy: `zoo.training.loop.trainer.Trainer` against the plain PyTorch
tutorial loop (model, CrossEntropyLoss, SGD, nothing else) on Fashion-MNIST with the CIFAR
ResNet-20 (1 input channel), side by side in one process.

Both read the same normalised tensors through a shuffling DataLoader and start from the same
weights with the same SGD settings (lr, momentum, no weight decay, no schedule). Throughput:
alternating timed runs of ``--steps`` optimizer steps each (DataLoader start-up included),
medians. Accuracy: each variant trains ``--epochs`` epochs on ``--subset`` training images,
then is scored on ``--test-subset`` test images; there the plain loop reads the samples in the
Trainer's order (its seeded per-epoch shuffle), so the runs differ only in what the Trainer
does, not in the luck of the shuffle (a few epochs from scratch vary by several points).

    .venv/bin/python benchmarks/train_throughput.py [--steps 20] [--repeats 3] [--epochs 2] [--subset 10000] [--no-bf16]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

import zoo
from zoo.training.data.builtin import load_fashion_mnist
from zoo.training.loop.loaders import EpochSampler
from zoo.training.loop.trainer import TrainConfig, Trainer

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set statistics


def fashion_mnist(split: str, limit: int) -> TensorDataset:
    images, labels = load_fashion_mnist(split)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:limit]
    x = (images[order].unsqueeze(1).float() / 255 - MEAN) / STD
    return TensorDataset(x, labels[order])


def plain_loop(
    model: nn.Module,
    data: TensorDataset,
    batch_size: int,
    lr: float,
    momentum: float,
    steps: int | None,
    epochs: int,
    trainer_order: bool = False,
) -> None:
    """The PyTorch tutorial's training loop ("Optimizing Model Parameters"), with momentum;
    ``trainer_order`` replaces its random shuffle by the Trainer's seeded one."""
    sampler = EpochSampler(data, seed=TrainConfig.seed) if trainer_order else None
    loader = DataLoader(data, batch_size=batch_size, shuffle=sampler is None, sampler=sampler, drop_last=True)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model.train()
    done = 0
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for X, y in loader:
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if steps is not None and done == steps:
                return


def engine_run(precision: str, channels_last: bool) -> Callable[..., None]:
    def run(
        model: nn.Module,
        data: TensorDataset,
        batch_size: int,
        lr: float,
        momentum: float,
        steps: int | None,
        epochs: int,
    ) -> None:
        config = TrainConfig(
            epochs=epochs,
            max_steps=steps,
            batch_size=batch_size,
            optimizer="sgd",
            lr=lr,
            momentum=momentum,
            weight_decay=0.0,
            scheduler="none",
            precision=precision,
            channels_last=channels_last,
            progress=False,
            tensorboard=False,
            plot=False,
        )
        Trainer(model, config).fit(data)

    return run


@torch.no_grad()
def accuracy(model: nn.Module, data: TensorDataset) -> float:
    model.eval().to(memory_format=torch.contiguous_format)
    correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in DataLoader(data, batch_size=500))
    return correct / len(data)


def throughput(variants: dict[str, Callable[..., None]], initial: nn.Module, args: argparse.Namespace) -> None:
    """Alternating timed runs of every variant; prints the median rates and their ratio."""
    timing_data = fashion_mnist("train", args.steps * args.batch_size)
    for run in variants.values():  # warm-up: oneDNN primitive creation, allocator
        run(copy.deepcopy(initial), timing_data, args.batch_size, args.lr, args.momentum, 2, 1)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    with tqdm(total=args.repeats * len(variants), desc="throughput") as bar:
        for _ in range(args.repeats):
            for name, run in variants.items():
                model = copy.deepcopy(initial)
                start = time.perf_counter()
                run(model, timing_data, args.batch_size, args.lr, args.momentum, args.steps, 1)
                rates[name].append(args.steps * args.batch_size / (time.perf_counter() - start))
                bar.update()
    print(f"throughput: {args.steps} SGD steps per run, median of {args.repeats}")
    plain = statistics.median(rates["plain loop, fp32 (tutorial)"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"  {name:<34} {median:8.1f} images/s   {median / plain:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per timed run (0: skip throughput)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="epochs for the accuracy comparison (0: skip it)")
    parser.add_argument("--subset", type=int, default=10000, help="training images for the accuracy comparison")
    parser.add_argument("--test-subset", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--no-bf16", action="store_true", help="skip the bf16 variant (slow on CPUs without bf16 kernels)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    initial = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    variants = {
        "plain loop, fp32 (tutorial)": plain_loop,
        "Trainer, fp32": engine_run("fp32", False),
        "Trainer, bf16 + channels_last": engine_run("bf16", True),
        "Trainer, fp32 + channels_last": engine_run("fp32", True),
    }
    if args.no_bf16:
        del variants["Trainer, bf16 + channels_last"]
    print(
        f"resnet20 on Fashion-MNIST 28x28 gray, batch {args.batch_size} (torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, CPU capability {torch.backends.cpu.get_cpu_capability()})"
    )
    if args.steps:
        throughput(variants, initial, args)

    if args.epochs:
        train, test = fashion_mnist("train", args.subset), fashion_mnist("test", args.test_subset)
        print(
            f"accuracy after {args.epochs} epoch(s) on {len(train)} training images, scored on {len(test)} test images"
        )
        reference = None
        for name, run in tqdm(variants.items(), desc="accuracy"):
            model = copy.deepcopy(initial)
            torch.manual_seed(1)
            start = time.perf_counter()
            extra = {"trainer_order": True} if run is plain_loop else {}
            run(model, train, args.batch_size, args.lr, args.momentum, None, args.epochs, **extra)
            elapsed = time.perf_counter() - start
            acc = accuracy(model, test)
            reference = acc if reference is None else reference
            tqdm.write(f"  {name:<34} {acc:7.2%}   {100 * (acc - reference):+5.2f} points   ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
