"""`zoo.optimize` against the deployment runtimes on this machine: ONNX Runtime and OpenVINO side
by side with it, and as its candidates; and what each precision costs in accuracy.

Peers (default): for ResNet-50 at 224 px (torchvision's ``resnet50``, random init seeded 0, its
state dict copied into zoo's ``resnet50``: identical weights; no published weights here) and the
bundled Fashion-MNIST models, one table per model and batch size of

- the reference in fp32 eager: torchvision's ResNet-50, or the Fashion-MNIST model itself;
- the peers, built from the reference model with each runtime's own tools: ONNX Runtime fp32
  (``torch.onnx.export``, dynamic batch, CPU provider) and static int8 (``quantize_static``),
  OpenVINO fp32 (``convert_model``) and int8 (NNCF post-training quantization), the int8 ones
  calibrated on the same training images (`zoo.deploy.runtimes` builds them);
- zoo's model: fp32 eager, every candidate ``zoo.optimize(..., "auto")`` built for it (the very
  modules it measured, recorded as they are built: channels_last, compiled fp32, bf16 where the
  CPU runs it natively, int8, and the runtimes' candidates) and its choice.

Everything is built first, then timed call by call in turn, the order rotated each round, so load
on the machine hits all of them alike. Each row: median ms, the reference's median over it (above
1: faster than the reference in eager PyTorch), top-1 agreement with the reference in fp32 on real
images (Fashion-MNIST test images, for ResNet-50 resized to 224 px and repeated to 3 channels),
and for the Fashion-MNIST models top-1 on those test images. Each auto report is checked against
itself (its pick is the fastest passing median, each speed-up eager's median over the candidate's);
``--auto-runs N`` runs auto N more times on one small model for that check alone.

Accuracy (``--accuracy``): top-1 over the Fashion-MNIST test set of the bundled models in fp32
eager and each precision of `zoo.optimize` (int8 calibrated on training images); on a CPU without
native bf16, bf16's graph still runs (emulated, slowly) for its accuracy, untimed.

    .venv/bin/python benchmarks/inference.py [--models resnet50 resnet20.fmnist ...] [--batch-sizes 16 1]
        [--fmnist-batch-sizes 16] [--repeats 7] [--threads N] [--auto-runs 3]
    .venv/bin/python benchmarks/inference.py --accuracy [--limit 10000] [--models resnet56.fmnist ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import zoo
from zoo.deploy import inference, runtimes
from zoo.deploy.bench import load_average, machine_line, time_in_turn
from zoo.deploy.optimize_report import OptimizeReport
from zoo.store.weight_entries import IMAGENET_MEAN, IMAGENET_STD
from zoo.training.data.builtin import load_fashion_mnist

PEER_MODELS = ("resnet50", "resnet20.fmnist", "densenet_bc_40.fmnist", "mobilenet_v2_cifar.fmnist")
ACCURACY_MODELS = ("resnet56.fmnist", "densenet_bc_40.fmnist", "mobilenet_v2_cifar.fmnist")


@dataclass
class Setup:
    """One model's side of the comparison: the reference and zoo's model (the same object for a
    Fashion-MNIST model), and the images: calibration batches, test images and their labels."""

    name: str
    reference: nn.Module
    model: nn.Module
    calibration: torch.Tensor
    images: torch.Tensor
    labels: torch.Tensor | None  # test labels: top-1 is reported for the Fashion-MNIST models only
    reference_name: str


def _resnet50_setup(calibration_images: int, test_images: int) -> Setup:
    torch.manual_seed(0)
    reference = torchvision.models.resnet50().eval()
    model = zoo.load("resnet50", pretrained=False)
    model.load_state_dict(reference.state_dict())
    train, _ = load_fashion_mnist("train")
    test, _ = load_fashion_mnist("test")
    return Setup(
        "resnet50",
        reference,
        model.eval(),
        _as_imagenet(train[:calibration_images]),
        _as_imagenet(test[:test_images]),
        None,
        "torchvision eager",
    )


def _as_imagenet(pixels: torch.Tensor) -> torch.Tensor:
    """Fashion-MNIST images as ImageNet inputs: 224 px (bilinear), 3 channels, ImageNet's normalization."""
    images = F.interpolate(pixels[:, None].float() / 255, size=224, mode="bilinear", align_corners=False)
    mean, std = torch.tensor(IMAGENET_MEAN)[:, None, None], torch.tensor(IMAGENET_STD)[:, None, None]
    return (images.repeat(1, 3, 1, 1) - mean) / std


def _fmnist_setup(name: str, calibration_images: int, test_images: int) -> Setup:
    model = zoo.load(name).eval()
    preprocess = zoo.transforms(model)
    train, _ = load_fashion_mnist("train")
    test, labels = load_fashion_mnist("test")
    return Setup(
        name,
        model,
        model,
        preprocess(train[:calibration_images, None]),
        preprocess(test[:test_images, None]),
        labels[:test_images],
        "eager",
    )


@contextmanager
def _recorded_builds() -> Iterator[dict[str, nn.Module]]:
    """Every candidate `zoo.optimize` builds meanwhile, by name (its ``_build`` wrapped)."""
    built: dict[str, nn.Module] = {}
    real = inference._build

    def record(name: str, *args: object) -> nn.Module:
        built[name] = module = real(name, *args)
        return module

    inference._build = record
    try:
        yield built
    finally:
        inference._build = real


def _peers(setup: Setup, batch: int) -> tuple[dict[str, Callable], dict[str, str]]:
    """The runtimes built from the reference model with their own tools, and what each cost to build."""
    calibration = [(b,) for b in setup.calibration.split(16)]
    variants, seconds = runtimes.build_peers(setup.reference, (setup.images[:batch],), calibration)
    notes = {}
    for name, shown in runtimes.PEER_NAMES.items():
        if shown in seconds:
            what = "quantized" if name.endswith("-int8") else "exported" if name == "onnxruntime" else "converted"
            notes[shown] = f"{what} in {seconds[shown]:.0f} s"
    return variants, notes


def _zoo_candidates(setup: Setup, batch: int) -> tuple[dict[str, Callable], dict[str, str], OptimizeReport]:
    """zoo's model in eager and every candidate auto built for it, and auto's report."""
    calibration = list(setup.calibration.split(16))
    start = time.perf_counter()
    with _recorded_builds() as built:
        chosen = zoo.optimize(setup.model, setup.images[:batch], "auto", calibration, cache=False, repeats=3)
    report = chosen.optimize_report
    seconds = time.perf_counter() - start
    by_name = {c.name: c for c in report.candidates}
    variants: dict[str, Callable] = {} if setup.model is setup.reference else {"zoo eager": setup.model}
    notes = {}
    for name, module in built.items():
        label = f"zoo.optimize {name}" + (" (auto's choice)" if name == report.precision else "")
        variants[label] = module
        c = by_name[name]
        notes[label] = "passed auto's check" if c.passed else f"auto: not used: {c.note}"
    print(f"  zoo.optimize auto built and measured {len(built)} candidates in {seconds:.0f} s")
    return variants, notes, report


@torch.no_grad()
def _predictions(run: Callable, images: torch.Tensor, batch: int) -> torch.Tensor:
    return torch.cat([run(x).argmax(-1) for x in images.split(batch)])


def _table(setup: Setup, batch: int, repeats: int) -> OptimizeReport:
    """Build the peers and zoo's candidates for ``setup`` at ``batch``, time them all together, print the table."""
    print(f"\n{setup.name}, batch {batch}: building", flush=True)
    variants: dict[str, Callable] = {setup.reference_name: setup.reference}
    notes = {setup.reference_name: "the reference"}
    peers, peer_notes = _peers(setup, batch)
    candidates, candidate_notes, report = _zoo_candidates(setup, batch)
    variants.update(peers)
    variants.update(candidates)
    notes.update(peer_notes)
    notes.update(candidate_notes)
    times = time_in_turn(variants, setup.images[:batch], repeats)
    medians = {name: statistics.median(t) for name, t in times.items()}
    fp32 = _predictions(setup.reference, setup.images, batch)
    base = medians[setup.reference_name]
    top1_head = " test top-1 % |" if setup.labels is not None else ""
    print(
        f"\n{setup.name}, batch {batch}, median of {repeats} rounds; agreement on {len(setup.images)} Fashion-MNIST "
        f"test images (fp32 predicts {fp32.unique().numel()} distinct classes on them)"
    )
    print(
        f"| variant | median ms | min ms | x {setup.reference_name} | top-1 agreement with fp32 % |{top1_head} note |"
    )
    print("|---|---|---|---|---|" + ("---|" if setup.labels is not None else "") + "---|")
    for name, run in variants.items():
        predicted = fp32 if run is setup.reference else _predictions(run, setup.images, batch)
        agreement = 100.0 * (predicted == fp32).float().mean().item()
        top1 = f" {100.0 * (predicted == setup.labels).float().mean().item():.2f} |" if setup.labels is not None else ""
        print(
            f"| {name} | {medians[name] * 1e3:.2f} | {min(times[name]) * 1e3:.2f} | {base / medians[name]:.2f} | "
            f"{agreement:.2f} |{top1} "
            f"{notes.get(name, '')} |",
            flush=True,
        )
    print(f"\nzoo.optimize auto for {setup.name}, batch {batch}:\n{report}\n{_agrees_with_itself(report)}")
    return report


def _agrees_with_itself(report: OptimizeReport) -> str:
    """Whether the report's pick is its fastest passing median and each speed-up its medians' ratio."""
    passed = [c for c in report.candidates if c.passed and c.median_s]
    eager = next(c for c in report.candidates if c.name == "eager")
    fastest = min(passed, key=lambda c: c.median_s)
    problems = [
        f"{c.name}'s speed-up {c.speedup:.4f} is not {eager.median_s / c.median_s:.4f}"
        for c in passed
        if abs(c.speedup - eager.median_s / c.median_s) > 1e-9 * c.speedup
    ]
    if fastest.name != report.precision:
        problems.append(f"chose {report.precision}, but {fastest.name} has the smallest median")
    if abs(report.speedup - fastest.speedup) > 1e-9 * fastest.speedup:
        problems.append(f"reported speed-up {report.speedup:.4f} is not the choice's {fastest.speedup:.4f}")
    if problems:
        return "report DISAGREES with itself: " + "; ".join(problems)
    return (
        f"report agrees with itself: {report.precision} has the smallest median of the {len(passed)} that passed, "
        f"and each speed-up is eager's median over its own ({report.speedup:.2f}x)"
    )


def auto_runs(name: str, batch: int, runs: int) -> None:
    """zoo.optimize auto ``runs`` times on ``name`` (its own images), each report checked against itself."""
    setup = _fmnist_setup(name, 256, 256)
    for run in range(1, runs + 1):
        start = time.perf_counter()
        optimized = zoo.optimize(
            setup.model, setup.images[:batch], "auto", list(setup.calibration.split(64)), cache=False, repeats=5
        )
        report = optimized.optimize_report
        print(
            f"\nauto run {run} of {runs}, {name} batch {batch} ({time.perf_counter() - start:.0f} s, load average "
            f"{load_average()}):\n{report}\n{_agrees_with_itself(report)}",
            flush=True,
        )


@torch.no_grad()
def _top1(run: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, labels: torch.Tensor, batch: int) -> float:
    correct = sum(int((run(x).argmax(-1) == y).sum()) for x, y in zip(images.split(batch), labels.split(batch)))
    return 100.0 * correct / len(labels)


def accuracy(names: list[str], limit: int, batch_size: int) -> None:
    """Top-1 of each model in each precision, and the points lost against fp32 eager."""
    test_images, test_labels = load_fashion_mnist("test")
    train_images, _ = load_fashion_mnist("train")
    test_images, test_labels = test_images[:limit, None], test_labels[:limit]
    batch_size = min(batch_size, limit)
    print(
        f"\nFashion-MNIST test, {len(test_labels)} images, batch {batch_size}; int8 calibrated on "
        f"{2 * batch_size} training images"
    )
    print("| model | precision | top-1 % | points vs fp32 eager | speed-up over fp32 eager (optimize's timing) |")
    print("|---|---|---|---|---|")
    precisions = ["fp32", *(["bf16"] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else []), "int8"]
    for name in names:
        model = zoo.load(name)
        preprocess = zoo.transforms(model)
        images, calibration = preprocess(test_images), preprocess(train_images[: 2 * batch_size, None])
        fp32 = _top1(model, images, test_labels, batch_size)
        print(f"| {name} | fp32 eager | {fp32:.2f} | 0.00 | 1.00 |", flush=True)
        for precision in precisions:
            optimized = zoo.optimize(model, calibration[:batch_size], precision, calibration, cache=False, repeats=3)
            top1 = _top1(optimized, images, test_labels, batch_size)
            speedup = optimized.optimize_report.speedup
            print(f"| {name} | {precision} | {top1:.2f} | {top1 - fp32:+.2f} | {speedup:.2f} |", flush=True)
        if "bf16" not in precisions:
            # the graph optimize(..., "bf16") builds (autocast, compiled with freezing), which a CPU
            # without native bf16 runs emulated: its accuracy holds, its speed says nothing
            emulated = inference._build("bf16", model, (calibration[:batch_size],), [], torch.bfloat16)
            top1 = _top1(emulated, images, test_labels, batch_size)
            print(f"| {name} | bf16, emulated (no native bf16 here) | {top1:.2f} | {top1 - fp32:+.2f} | not timed |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", help=f"default: {' '.join(PEER_MODELS)} (--accuracy: {' '.join(ACCURACY_MODELS)})"
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 1], help="for ResNet-50")
    parser.add_argument("--fmnist-batch-sizes", type=int, nargs="+", default=[16], help="for Fashion-MNIST models")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds of every variant")
    parser.add_argument("--calibration-images", type=int, default=64, help="training images, int8 calibration")
    parser.add_argument("--resnet50-images", type=int, default=128, help="test images for ResNet-50's agreement")
    parser.add_argument("--fmnist-images", type=int, default=10_000, help="test images for the Fashion-MNIST models")
    parser.add_argument("--auto-runs", type=int, default=0, help="then run auto this many times on --auto-model")
    parser.add_argument("--auto-model", default="resnet20.fmnist")
    parser.add_argument("--auto-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--accuracy", action="store_true", help="measure top-1 of optimize's precisions instead")
    parser.add_argument("--limit", type=int, default=10_000, help="test images for --accuracy")
    parser.add_argument("--batch-size", type=int, default=500, help="batch size for --accuracy")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    if args.accuracy:
        accuracy(args.models or list(ACCURACY_MODELS), args.limit, args.batch_size)
        return
    for name in args.models or (PEER_MODELS if not args.auto_runs else ()):
        if name == "resnet50":
            setup, sizes = _resnet50_setup(args.calibration_images, args.resnet50_images), args.batch_sizes
        else:
            setup, sizes = _fmnist_setup(name, 4 * args.calibration_images, args.fmnist_images), args.fmnist_batch_sizes
        for batch in sizes:
            _table(setup, batch, args.repeats)
    if args.auto_runs:
        auto_runs(args.auto_model, args.auto_batch, args.auto_runs)
    print(f"\nload average at the end: {load_average()} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
