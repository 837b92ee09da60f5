"""ResNet-50 inference on a CUDA GPU: torchvision's model in eager fp32 and under
``torch.autocast`` (fp16, the mixed precision a GPU user reaches for; also channels_last), against
``zoo.optimize("auto")`` on zoo's ``resnet50`` holding the same weights, side by side in one run.

The weights are torchvision's ``resnet50()`` initialised with seed 0 and copied into zoo's model
(no published weights offline): speed only, plus each variant's largest output difference from
torchvision's fp32 (relative to fp32's largest output) on the timed batch. Every variant is
called in turn, the order rotated each round, and timed with CUDA events around each call
(after a warm-up that compiles what compiles); the table gives median ms per batch, images/s
and the ratio to torchvision fp32 eager and to its autocast eager. ``--profile`` adds, for the
largest batch, what the GPU was busy with during zoo's choice and the autocast peer (kernel time
against wall time: a run whose kernels fill a small part of its wall time is bound by launches).

    .venv/bin/python benchmarks/cuda_inference.py [--batch-sizes 1 64 256] [--repeats 30] [--profile]
        [--csv results/cuda-h100.csv]
    # a dry run of the script on the CPU (autocast in bf16 there; no speed claims):
    .venv/bin/python benchmarks/cuda_inference.py --device cpu --model resnet18 --image-size 64 \\
        --batch-sizes 2 --repeats 3 --zoo-precision fp32
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torchvision

import zoo


def hardware(device: torch.device) -> str:
    """The machine in one line: GPU, torch, CUDA and cuDNN versions (or the CPU's capability)."""
    if device.type == "cuda":
        return (
            f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}, TF32 matmul {torch.backends.cuda.matmul.allow_tf32}"
        )
    return (
        f"CPU {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """torch.autocast as a user writes it: fp16 on a GPU; bf16 on a CPU (its only autocast dtype)."""
    return torch.autocast(device.type, dtype=torch.float16 if device.type == "cuda" else torch.bfloat16)


def peers(reference: nn.Module, device: torch.device) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """torchvision's model in eager fp32, autocast, and autocast on channels_last inputs and weights."""
    channels_last = _copy_channels_last(reference)

    def autocast(model: nn.Module, memory_format: torch.memory_format) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(x: torch.Tensor) -> torch.Tensor:
            with _autocast(device):
                return model(x.contiguous(memory_format=memory_format))

        return run

    return {
        "torchvision fp32 eager": reference,
        "torchvision autocast eager": autocast(reference, torch.contiguous_format),
        "torchvision autocast channels_last": autocast(channels_last, torch.channels_last),
    }


def _copy_channels_last(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).to(memory_format=torch.channels_last)


def time_in_turn(
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]], x: torch.Tensor, repeats: int, warmup: int = 3
) -> dict[str, list[float]]:
    """Milliseconds per call of each variant, called in turn, the order rotated each round."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    with torch.inference_mode():
        for _ in range(warmup):
            for name in names:
                variants[name](x)
        _synchronize(x.device)
        for repeat in range(repeats):
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(_one_call(variants[name], x))
    return times


def _one_call(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    """One call's milliseconds: CUDA events on a GPU, the wall clock on a CPU."""
    if x.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(x)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    start_s = time.perf_counter()
    run(x)
    return (time.perf_counter() - start_s) * 1e3


@torch.inference_mode()
def relative_difference(run: Callable[[torch.Tensor], torch.Tensor], fp32: torch.Tensor, x: torch.Tensor) -> float:
    """max |run(x) - fp32| / max |fp32|."""
    return float((run(x).float() - fp32).abs().max() / fp32.abs().max())


def profile(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, calls: int = 10) -> str:
    """What the device was busy with over ``calls`` calls: the top kernels, and their total time
    against the wall time (kernel time much below wall time: bound by launches, not kernels)."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if x.device.type == "cuda" else [])
    with torch.inference_mode(), torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            run(x)
        _synchronize(x.device)
        wall_ms = (time.perf_counter() - start) * 1e3
    events = prof.key_averages()
    sort = "cuda_time_total" if x.device.type == "cuda" else "cpu_time_total"
    kernel_us = sum(e.device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    busy = (
        f", GPU kernels {kernel_us / 1e3:.1f} ms ({100 * kernel_us / 1e3 / wall_ms:.0f}% of the wall time)"
        if x.device.type == "cuda"
        else ""
    )
    return events.table(sort_by=sort, row_limit=12) + f"\n{calls} calls: wall {wall_ms:.1f} ms{busy}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision and zoo architecture name")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--zoo-precision", default="auto", help="what zoo.optimize is asked for (default auto)")
    parser.add_argument("--profile", action="store_true", help="profile zoo's choice and the autocast peer")
    parser.add_argument("--csv", type=Path, help="also write the rows to this CSV file")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(hardware(device), flush=True)
    torch.manual_seed(0)
    reference = getattr(torchvision.models, args.model)().eval().to(device)
    model = zoo.load(args.model, pretrained=False).eval().to(device)
    model.load_state_dict(reference.state_dict())
    rows = []
    for batch in args.batch_sizes:
        rows += measure(reference, model, batch, args, device)
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")


def measure(
    reference: nn.Module, model: nn.Module, batch: int, args: argparse.Namespace, device: torch.device
) -> list[dict[str, object]]:
    """Build zoo's choice for ``batch``, time it with the peers, print the table; returns its rows."""
    generator = torch.Generator().manual_seed(batch)
    x = torch.randn(batch, 3, args.image_size, args.image_size, generator=generator).to(device)
    calibration = [torch.randn(8, 3, args.image_size, args.image_size, generator=generator).to(device)]
    start = time.perf_counter()
    optimized = zoo.optimize(model, x, args.zoo_precision, calibration, cache=False, runtimes=False)
    report = optimized.optimize_report
    print(f"\n{args.model}, batch {batch}: zoo.optimize {args.zoo_precision} in {time.perf_counter() - start:.0f} s")
    print(report, flush=True)
    variants = {**peers(reference, device), f"zoo.optimize {args.zoo_precision} ({report.precision})": optimized}
    times = time_in_turn(variants, x, args.repeats)
    with torch.inference_mode():
        fp32 = reference(x).float()
    medians = {name: statistics.median(t) for name, t in times.items()}
    base, autocast = medians["torchvision fp32 eager"], medians["torchvision autocast eager"]
    print(f"\n{args.model}, batch {batch}, {args.image_size} px, median of {args.repeats} calls each")
    print("| variant | median ms | images/s | x torchvision fp32 | x torchvision autocast | max rel. diff from fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for name, run in variants.items():
        ms = medians[name]
        diff = relative_difference(run, fp32, x)
        print(f"| {name} | {ms:.2f} | {batch / ms * 1e3:.0f} | {base / ms:.2f} | {autocast / ms:.2f} | {diff:.1e} |")
        rows.append(
            {
                "model": args.model,
                "variant": name,
                "batch_size": batch,
                "median_ms": round(ms, 3),
                "samples_per_sec": round(batch / ms * 1e3, 1),
                "x_fp32_eager": round(base / ms, 2),
                "x_autocast_eager": round(autocast / ms, 2),
                "max_rel_diff": f"{diff:.1e}",
                "device": hardware(device),
            }
        )
    if args.profile and batch == max(args.batch_sizes):
        for name in (list(variants)[-1], "torchvision autocast eager"):
            print(f"\nprofile of {name}, batch {batch}:\n{profile(variants[name], x)}", flush=True)
    return rows


if __name__ == "__main__":
    main()
