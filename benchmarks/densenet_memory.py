"""Peak memory and time of one DenseNet training step (forward + backward), plain against
memory-efficient mode (Pleiss et al., 2017), zoo's DenseNet beside torchvision's in the same run.

Each configuration runs in a fresh subprocess, and its peak is taken over its first step: on
CUDA ``torch.cuda.max_memory_allocated`` above the memory already allocated, on CPU the growth
of the process's peak resident memory (``ru_maxrss``) over its level once the model, the input
and zeroed gradients exist; either way it counts the activations kept for backward and the
step's temporaries. Step time is the median of the ``--steps`` steps that follow.
The CIFAR comparison gives torchvision's class zoo's small-image stem (3x3 conv, no BN/pool).

    .venv/bin/python benchmarks/densenet_memory.py [--steps 3] [--size 224]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torchvision

from zoo.architectures import densenet


def _torchvision_cifar(memory_efficient: bool) -> nn.Module:
    """torchvision's DenseNet with densenet_bc_100's configuration and stem."""
    model = torchvision.models.DenseNet(12, (16, 16, 16), 24, num_classes=10, memory_efficient=memory_efficient)
    model.features.conv0 = nn.Conv2d(3, 24, 3, padding=1, bias=False)
    model.features.norm0 = model.features.relu0 = model.features.pool0 = nn.Identity()
    return model


def _build(impl: str, arch: str, efficient: bool) -> nn.Module:
    if impl == "torchvision":
        if arch == "densenet_bc_100":
            return _torchvision_cifar(efficient)
        return getattr(torchvision.models, arch)(memory_efficient=efficient)
    model = getattr(densenet, arch)()
    model.set_grad_checkpointing(efficient)
    return model


def _peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_one(impl: str, arch: str, efficient: bool, batch: int, size: int, steps: int) -> dict[str, float]:
    """One configuration, in this process: peak memory above the resting level and step time."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = _build(impl, arch, efficient).to(device).train()
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), target)
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    resting = torch.cuda.memory_allocated() / 2**20 if device.type == "cuda" else _peak_mb(device)
    step()
    peak = _peak_mb(device) - resting
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"peak_mb": peak, "step_s": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    parser.add_argument("--size", type=int, default=224, help="densenet121 image size")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # JSON: run one configuration and print its result
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(**json.loads(args.one))))
        return

    device = "cuda" if torch.cuda.is_available() else f"cpu, {torch.get_num_threads()} threads"
    print(f"DenseNet training step, plain vs memory-efficient (torch {torch.__version__}, {device})")
    print(f"peak = {'max_memory_allocated' if torch.cuda.is_available() else 'ru_maxrss growth'} above model+grads")
    cases = [("densenet_bc_100", 64, 32), ("densenet121", 8, args.size)]
    for arch, batch, size in cases:
        print(f"\n{arch}, batch {batch}, {size}x{size}")
        header = f"{'plain MB':>9} {'efficient MB':>13} {'ratio':>6} {'plain s':>8} {'efficient s':>12}"
        print(f"  {'implementation':<13} {header}")
        for impl in ("zoo", "torchvision"):
            result = {}
            for efficient in (False, True):
                config = dict(impl=impl, arch=arch, efficient=efficient, batch=batch, size=size, steps=args.steps)
                out = subprocess.run(
                    [sys.executable, __file__, "--one", json.dumps(config)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                result[efficient] = json.loads(out.stdout.strip().splitlines()[-1])
            plain, efficient = result[False], result[True]
            print(
                f"  {impl:<13} {plain['peak_mb']:9.0f} {efficient['peak_mb']:13.0f} "
                f"{efficient['peak_mb'] / plain['peak_mb']:6.2f} {plain['step_s']:8.2f} {efficient['step_s']:12.2f}"
            )


if __name__ == "__main__":
    main()
