"""Inference speed of zoo's vision models against torchvision's, side by side in one process.

For each architecture, a randomly initialised torchvision model's state dict is loaded into
zoo's model (outputs checked equal first), then both run the same input in eval mode, fp32,
on the CPU, alternating zoo and torchvision call by call, with the order swapped every
repeat (whichever runs second in a pair is ~3% slower here, even for two identical
torchvision models: an A/A check). Prints the median time per batch
and the ratio torchvision / zoo (above 1: zoo is faster).

    .venv/bin/python benchmarks/vision_inference.py [--repeats 16] [--batch-sizes 1 16] [--models ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torchvision

import zoo

MODELS = ("resnet18", "resnet50", "densenet121", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small")


def _time(model: torch.nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    model(x)
    return time.perf_counter() - start


@torch.inference_mode()
def compare(name: str, batch_size: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds per batch for torchvision and zoo, and the max abs output difference."""
    torch.manual_seed(0)
    reference = getattr(torchvision.models, name)().eval()
    model = zoo.load(name, pretrained=False)
    model.load_state_dict(reference.state_dict())
    model.eval()
    x = torch.randn(batch_size, 3, 224, 224)
    diff = (model(x) - reference(x)).abs().max().item()
    for warmup in (reference, model):
        warmup(x)
    tv_times, zoo_times = [], []
    for repeat in range(repeats):
        if repeat % 2:
            zoo_times.append(_time(model, x))
            tv_times.append(_time(reference, x))
        else:
            tv_times.append(_time(reference, x))
            zoo_times.append(_time(model, x))
    return statistics.median(tv_times), statistics.median(zoo_times), diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.get_num_threads()} threads, "
        f"224 px, fp32, eval, median of {args.repeats}"
    )
    print("| model | batch | torchvision ms | zoo ms | ratio (tv / zoo) | max abs diff |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        for batch_size in args.batch_sizes:
            tv, ours, diff = compare(name, batch_size, args.repeats)
            print(
                f"| {name} | {batch_size} | {tv * 1e3:.1f} | {ours * 1e3:.1f} | {tv / ours:.2f} | {diff:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
