"""`zoo.optimize` on this machine: speed against torchvision's ResNet-50, and what each precision
costs in accuracy on Fashion-MNIST.

Speed (default): torchvision ``resnet50`` in fp32 eager is 1.0x; zoo's ``resnet50`` with the same
(random) weights runs fp32 eager, channels_last eager, each precision `zoo.optimize` offers here
(compiled fp32, bf16 where the CPU runs it natively, int8) and "auto", on 224 px batches. Every
variant is built first, then timed call by call in turn, the order rotated each repeat, so load
on the machine hits all of them alike. Prints medians and the ratio torchvision / variant
(above 1: faster than torchvision's eager).

Accuracy (``--accuracy``): top-1 over the Fashion-MNIST test set (or its first ``--limit``
images) of resnet56.fmnist, densenet_bc_40.fmnist and mobilenet_v2_cifar.fmnist in fp32 eager,
compiled fp32, bf16 and int8 (calibrated on training images), with the difference in points
and the speed-up `zoo.optimize` measured for each. On a CPU without native bf16, bf16's graph
still runs (emulated, slowly) for its accuracy, untimed.

    .venv/bin/python benchmarks/inference.py [--repeats 10] [--batch-sizes 16 1] [--precisions auto]
        [--threads N]
    .venv/bin/python benchmarks/inference.py --accuracy [--limit 10000] [--models resnet56.fmnist ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torchvision

import zoo
from zoo.deploy import inference
from zoo.deploy.inference import has_amx
from zoo.training.data import load_fashion_mnist

ACCURACY_MODELS = ("resnet56.fmnist", "densenet_bc_40.fmnist", "mobilenet_v2_cifar.fmnist")


def _precisions() -> list[str]:
    """The explicit precisions that apply to a CNN on this CPU."""
    native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return ["fp32", *(["bf16"] if native_bf16 else []), "int8"]


def _time(run: Callable[[torch.Tensor], object], x: torch.Tensor) -> float:
    start = time.perf_counter()
    run(x)
    return time.perf_counter() - start


@torch.no_grad()
def speed(batch_size: int, repeats: int, precisions: list[str]) -> None:
    """Median seconds per batch of every variant, side by side, against torchvision's eager;
    then what "auto" measured of each candidate (against zoo's fp32 eager, timed in turn)."""
    torch.manual_seed(0)
    reference = torchvision.models.resnet50().eval()
    model = zoo.load("resnet50", pretrained=False)
    model.load_state_dict(reference.state_dict())
    model.eval()
    x = torch.randn(batch_size, 3, 224, 224)
    channels_last = zoo.load("resnet50", pretrained=False).to(memory_format=torch.channels_last).eval()
    channels_last.load_state_dict(reference.state_dict())
    variants: dict[str, Callable[[torch.Tensor], object]] = {
        "torchvision fp32 eager": reference,
        "zoo fp32 eager": model,
        "zoo channels_last eager": lambda t: channels_last(t.contiguous(memory_format=torch.channels_last)),
    }
    notes = {}
    reports = []
    for precision in precisions:
        start = time.perf_counter()
        optimized = zoo.optimize(model, x, precision, cache=False, repeats=3)
        report = optimized.optimize_report
        label = f"zoo.optimize {precision}" + (f" -> {report.precision}" if precision == "auto" else "")
        variants[label] = optimized
        notes[label] = f"built and checked in {time.perf_counter() - start:.0f} s"
        if precision == "auto":
            reports.append(report)
    diff = (model(x) - reference(x)).abs().max().item()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for name in names:
        variants[name](x)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            times[name].append(_time(variants[name], x))
    base = statistics.median(times["torchvision fp32 eager"])
    print(f"\nbatch {batch_size}, 224 px, median of {repeats} (zoo vs torchvision max abs diff {diff:.1e})")
    print("| variant | ms | ratio (torchvision eager / variant) | note |")
    print("|---|---|---|---|")
    for name in names:
        median = statistics.median(times[name])
        print(f"| {name} | {median * 1e3:.1f} | {base / median:.2f} | {notes.get(name, '')} |", flush=True)
    for report in reports:
        print(f"\nzoo.optimize auto, batch {batch_size}: {report}")


@torch.no_grad()
def _top1(
    run: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> float:
    correct = sum(
        int((run(x).argmax(-1) == y).sum()) for x, y in zip(images.split(batch_size), labels.split(batch_size))
    )
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
    for name in names:
        model = zoo.load(name)
        preprocess = zoo.transforms(model)
        images, calibration = preprocess(test_images), preprocess(train_images[: 2 * batch_size, None])
        fp32 = _top1(model, images, test_labels, batch_size)
        print(f"| {name} | fp32 eager | {fp32:.2f} | 0.00 | 1.00 |", flush=True)
        for precision in _precisions():
            optimized = zoo.optimize(model, calibration[:batch_size], precision, calibration, cache=False, repeats=3)
            top1 = _top1(optimized, images, test_labels, batch_size)
            print(
                f"| {name} | {precision} | {top1:.2f} | {top1 - fp32:+.2f} | {optimized.optimize_report.speedup:.2f} |",
                flush=True,
            )
        if "bf16" not in _precisions():
            # the graph optimize(..., "bf16") builds (autocast, compiled with freezing), which a CPU
            # without native bf16 runs emulated: its accuracy holds, its speed says nothing
            emulated = inference._build("bf16", model, (calibration[:batch_size],), [], torch.bfloat16)
            top1 = _top1(emulated, images, test_labels, batch_size)
            print(
                f"| {name} | bf16, emulated (no native bf16 here) | {top1:.2f} | {top1 - fp32:+.2f} | not timed |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 1])
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=[p for p in inference.PRECISIONS if p != "fp16"],  # CPU
        help="optimize's precisions to build (default: each that applies here, and auto)",
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--accuracy", action="store_true", help="measure top-1 on Fashion-MNIST instead of speed")
    parser.add_argument("--models", nargs="+", default=list(ACCURACY_MODELS), help="weights for --accuracy")
    parser.add_argument("--limit", type=int, default=10_000, help="test images for --accuracy")
    parser.add_argument("--batch-size", type=int, default=500, help="batch size for --accuracy")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"AMX {'yes' if has_amx() else 'no'}, native bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, "
        f"{torch.get_num_threads()} threads"
    )
    if args.accuracy:
        accuracy(args.models, args.limit, args.batch_size)
        return
    for batch_size in args.batch_sizes:
        speed(batch_size, args.repeats, args.precisions or [*_precisions(), "auto"])


if __name__ == "__main__":
    main()
