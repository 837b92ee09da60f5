"""Compute and speed of the registry's models: `count_macs` (the ``gmacs`` every weight entry
records) and the measurements behind `zoo bench` (`zoo.cli.bench_command`), a results table over the weight entries like timm's results CSVs
(parameters, GMACs, file size, top-1, measured inference samples/s).

MACs are counted per sample at the entry's own input size: images at the preprocessing's crop
(224 px for ImageNet, 28 px for the Fashion-MNIST weights) with the model's input channels,
text for a sequence of `TEXT_TOKENS` tokens, vectors (the DBN) for one visible vector. Graph
models record none (``gmacs: null``): their MACs grow with each graph's nodes, so no one
figure describes the weights; `zoo bench` skips them for the same reason.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import fnmatch
import io
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from zoo.deploy.exporter import example_input_for
from zoo.deploy.inference import medians
from zoo.deploy.inference import optimize as optimize_model
from zoo.deploy.optimize_report import OptimizeReport
from zoo.errors import UnknownModelError
from zoo.store import weight_entries
from zoo.store.files import write_bytes_atomic
from zoo.store.weight_entries import WeightInfo

TEXT_TOKENS = 256  # the sequence length text models are counted and timed at
# the fused attention kernels FlopCounterMode has formulas for (torchvision's counter has none)
_ATTENTION_OPS = [op for op in flop_registry if str(op).startswith("aten.") and "attention" in str(op)]


def count_macs(model: nn.Module, example_input: Any, attention: bool = True) -> int:
    """Multiply-accumulates of one ``model(example_input)``, counted by PyTorch's
    ``FlopCounterMode`` (which counts 2 FLOPs per multiply-accumulate of matrix products,
    convolutions and attention, and nothing for biases, norms, activations or pooling), halved:
    the convention of torchvision's and timm's published figures (ResNet-50: 4.09 G at 224 px).
    Attention runs on the math backend: the counter has no formula for the CPU's fused kernel,
    which it would count as nothing. ``attention=False`` counts as torchvision's FLOP counter
    measures its weights' ``_ops``: the model as it runs, a fused attention kernel as nothing."""
    backend = sdpa_kernel(SDPBackend.MATH) if attention else contextlib.nullcontext()
    uncounted = {} if attention else dict.fromkeys(_ATTENTION_OPS, lambda *args, **kwargs: 0)
    with torch.no_grad(), backend, FlopCounterMode(display=False, custom_mapping=uncounted) as counter:
        model(example_input)
    return counter.get_total_flops() // 2


def gmacs(model: nn.Module, preprocess: dict[str, Any], attention: bool = True) -> float | None:
    """GMACs per sample (4 significant digits, and at least 3 decimals: torchvision's ``_ops``
    is rounded to 3) at the weights' input size (``preprocess``), text at `TEXT_TOKENS` tokens;
    None for graph models. ``attention=False``: as torchvision's ``_ops`` (`count_macs`)."""
    if weight_entries.input_kind(model.pretrained_cfg["architecture"]) == "graphs":
        return None
    macs = count_macs(model, _example(model, preprocess, 1), attention) / 1e9
    return round(macs, max(3, 3 - math.floor(math.log10(macs)))) if macs > 0 else 0.0


def _example(model: nn.Module, preprocess: dict[str, Any], batch: int) -> torch.Tensor:
    return example_input_for(model, batch, preprocess=preprocess, sequence_length=TEXT_TOKENS)


@dataclass
class BenchRow:
    """One line of the results table: a model at one batch size."""

    model: str
    weights: str  # "bundled", "cached" (a published file already downloaded), "random", "folder" or "hub"
    top1: float | None
    param_count: float  # millions, as timm's CSVs
    gmacs: float | None
    input_shape: str  # one sample, e.g. "3x224x224" or "256" (tokens)
    file_size_mb: float | None
    batch_size: int
    infer_samples_per_sec: float  # fp32, eager
    infer_step_time_ms: float
    optimized_samples_per_sec: float | None  # zoo.optimize's choice, timed the same way
    optimized_precision: str | None  # what zoo.optimize chose: eager, channels_last, fp32 (compiled), bf16, int8
    optimized_speedup: float | None


@dataclass(frozen=True)
class BenchTarget:
    """What to benchmark: a weight entry, or an architecture with random weights."""

    name: str
    info: WeightInfo | None  # None: an architecture, measured with random weights


def select(patterns: Sequence[str]) -> list[BenchTarget]:
    """The weight entries matching any fnmatch pattern (every entry without patterns), and the
    architectures named exactly (benchmarked with random weights)."""
    entries = weight_entries.list_models(list(patterns) or "*", pretrained=True)
    targets = [BenchTarget(name, weight_entries.info(name)) for name in entries]
    for pattern in patterns:
        if pattern in weight_entries.list_models(pattern):
            targets.append(BenchTarget(pattern, None))
        elif not fnmatch.filter(entries, pattern):
            raise UnknownModelError(
                f"{pattern!r} matches no weight entry or architecture; `zoo list --pretrained` shows "
                "the weight names (patterns such as 'resnet*' work), `zoo list` the architectures"
            )
    return targets


def _top1(info: WeightInfo | None) -> float | None:
    """Top-1 on the entry's evaluation task (the full test set), else on any task that has one."""
    if info is None:
        return None
    ordered = [info.metrics.get(info.eval_task or "", {}), *info.metrics.values()]
    return next((metrics["top1"] for metrics in ordered if "top1" in metrics), None)


def measure(
    target: BenchTarget,
    model: nn.Module,
    preprocess: dict[str, Any],
    model_gmacs: float | None,
    batch_size: int,
    repeats: int,
    optimize: bool,
) -> tuple[BenchRow, OptimizeReport | None]:
    """One row: the model timed at ``batch_size`` in fp32 eager and, with ``optimize``, as
    optimize chooses; and optimize's report (None without ``optimize``)."""
    info = target.info
    x = _example(model, preprocess, batch_size)
    optimized_rate = precision = report = None
    if optimize:  # timed in turn with fp32 eager, as optimize times its candidates
        optimized = optimize_model(model, x)
        seconds, optimized_seconds = medians([model, optimized], (x,), repeats, x.device)
        report = optimized.optimize_report
        optimized_rate, precision = round(len(x) / optimized_seconds, 2), report.precision
    else:
        (seconds,) = medians([model], (x,), repeats, x.device)
    rate = len(x) / seconds
    row = BenchRow(
        model=target.name,
        weights="random" if info is None else ("bundled" if info.file is not None else "cached"),
        top1=_top1(info),
        param_count=round(sum(p.numel() for p in model.parameters()) / 1e6, 3),
        gmacs=model_gmacs,
        input_shape="x".join(map(str, x.shape[1:])),
        file_size_mb=None if info is None or info.file_size is None else round(info.file_size / 2**20, 2),
        batch_size=batch_size,
        infer_samples_per_sec=round(rate, 2),
        infer_step_time_ms=round(seconds * 1e3, 3),
        optimized_samples_per_sec=optimized_rate,
        optimized_precision=precision,
        optimized_speedup=None if optimized_rate is None else round(optimized_rate / rate, 2),
    )
    return row, report


def machine_header(device: str = "cpu") -> list[str]:
    """What the speeds depend on: CPU capability, AMX, torch version, threads; and the GPU
    when the models run on one (``device``)."""
    from zoo.devices import cpu_features

    cpu = cpu_features()
    gpu = [f"gpu: {torch.cuda.get_device_name(device)}"] if torch.device(device).type == "cuda" else []
    return gpu + [
        f"cpu: {platform.processor() or platform.machine()}, capability {cpu.capability}, "
        f"AMX {'present' if cpu.amx else 'absent'}" + (f" (ZOO_CPU_FEATURES={cpu.override})" if cpu.override else ""),
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
    ]


def time_in_turn(variants: dict[str, Callable], x: torch.Tensor, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each variant, round by round, called in turn with the order rotated
    each round (after one untimed call each), so they share the machine's load alike: the one
    way the benchmarks time variants side by side."""
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    with torch.no_grad():
        for name in names:  # first calls, and each thread pool awake
            variants[name](x)
        for round_ in range(rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                variants[name](x)
                times[name].append(time.perf_counter() - start)
    return times


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, for a benchmark's lines (speeds on a shared machine depend on them)."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"


def machine_line() -> str:
    """One line for a benchmark's output: the date, the CPU by name and features (capability,
    AMX, native bf16, VNNI), threads, torch's and the runtimes' versions, the load average now."""
    from zoo.deploy import runtimes
    from zoo.devices import cpu_features

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    return (
        f"{datetime.date.today()}, {cpu}, {os.cpu_count()} cores, CPU capability {cpu_features()}, "
        f"{torch.get_num_threads()} threads; torch {torch.__version__}, "
        f"{runtimes.versions() or 'no runtime installed'}; load average {load_average()} (1, 5, 15 min)"
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_table(rows: Sequence[BenchRow]) -> str:
    """The rows as an aligned text table, one header line."""
    columns = [
        ("model", "model"),
        ("weights", "weights"),
        ("top1", "top1"),
        ("params (M)", "param_count"),
        ("GMACs", "gmacs"),
        ("input", "input_shape"),
        ("MiB", "file_size_mb"),
        ("batch", "batch_size"),
        ("fp32 samples/s", "infer_samples_per_sec"),
        ("optimized samples/s", "optimized_samples_per_sec"),
        ("precision", "optimized_precision"),
        ("speed-up", "optimized_speedup"),
    ]
    cells = [[title for title, _ in columns], *([_cell(getattr(row, key)) for _, key in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells)


def format_peers(reports: Sequence[tuple[str, int, OptimizeReport]]) -> str:
    """Every candidate optimize measured for each row, side by side: torch's (eager, channels_last,
    compiled fp32, bf16, int8) and the runtimes' (ONNX Runtime, OpenVINO, fp32 and int8), with the
    median ms, the speed-up over fp32 eager (the final round's medians for those that passed) and
    top-1 agreement with fp32 eager on the example batch (random inputs: zoo bench has no data;
    ``benchmarks/inference.py`` measures on real images); those that did not run say why."""
    header = ("model", "batch", "candidate", "ms", "speed-up", "top-1 agreement", "status")
    lines = [header]
    for name, batch_size, report in reports:
        for c in report.candidates:
            ms = "-" if c.median_s is None else f"{c.median_s * 1e3:.3g}"
            speedup = "-" if c.speedup is None else f"{c.speedup:.2f}"
            agreement = "-" if c.top1_agreement is None else f"{c.top1_agreement:.2%}"
            status = ("chosen" if c.name == report.precision else "ok") if c.passed else f"not used: {c.note}"
            lines.append((name, str(batch_size), c.name, ms, speedup, agreement, status))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in lines)


def write_csv(rows: Sequence[BenchRow], path: str | os.PathLike) -> None:
    """The rows as CSV with timm's column names where timm has one, written atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[f for f in BenchRow.__dataclass_fields__], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in asdict(row).items()})
    write_bytes_atomic(path, buffer.getvalue().encode())
