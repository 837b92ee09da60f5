"""What bounds the two GPU goals the H200 run missed (docs/results.md, "On a GPU"): a training
step of the CIFAR ResNet-20 at batch 128 on 28x28 images (zoo's Trainer reached 1.17-1.33x the
tutorial loop, the goal 2x) and a greedy decoding step of ``moe_lm.stdlib`` at batch 1 (zoo's
compiled decode 0.77x transformers' CUDA-graph static cache). For each, the profiler's GPU kernel
time against the wall time and the kernels launched per step: a step whose kernels fill a small
share of its wall time is bound by launching them (CPU and driver), not by the GPU's arithmetic.

    python benchmarks/cuda_bounds.py [--device cuda] [--steps 50] [--tokens 64]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import zoo


def measure(step: Callable[[], object], steps: int, device: torch.device) -> str:
    """Wall time, GPU kernel time and kernel launches per call of ``step`` (after 10 warm-ups)."""
    for _ in range(10):
        step()
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - start) * 1e3 / steps
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernel_ms = sum(e.device_time_total for e in kernels) / 1e3 / steps
    launches = sum(e.count for e in kernels) / steps
    return (
        f"wall {wall_ms:.2f} ms per step, GPU kernels {kernel_ms:.2f} ms ({100 * kernel_ms / wall_ms:.0f}% of the "
        f"wall time), {launches:.0f} kernels per step ({1e3 * wall_ms / max(launches, 1):.1f} us of wall time each)"
    )


def training_step(device: torch.device, batch: int) -> Callable[[], object]:
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(batch, 1, 28, 28, device=device), torch.randint(0, 10, (batch,), device=device)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def decode_steps(device: torch.device, tokens: int) -> Callable[[], object]:
    model = zoo.load("moe_lm.stdlib").to(device).eval()
    prompt = torch.tensor([[0, *b"def fib(n):"]], device=device)
    return lambda: model.generate(prompt, tokens, temperature=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}")
    print(f"resnet20 training step, batch 128, fp32: {measure(training_step(device, 128), args.steps, device)}")
    print(f"resnet20 training step, batch 1024, fp32: {measure(training_step(device, 1024), args.steps, device)}")
    line = measure(decode_steps(device, args.tokens), 3, device)
    line = line.replace("per step", "per call")
    print(f"moe_lm.stdlib greedy generation of {args.tokens} tokens, batch 1, eager: {line}")


if __name__ == "__main__":
    main()
