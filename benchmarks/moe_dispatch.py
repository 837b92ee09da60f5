"""MoE layer speed: zoo's SparseMoeBlock against transformers' MixtralSparseMoeBlock with the
same weights, side by side in one process, for every experts implementation transformers runs
on a CPU ("eager": a Python loop over the experts hit; "batched_mm": a gathered weight per
token slot; "grouped_mm": torch's grouped GEMM, transformers' default), and zoo's two
dispatches ("split": one matmul per non-empty expert, zoo's choice on CPU; "grouped_mm").

Mixtral-like layer: hidden 512, intermediate 1024, 8 experts, top-2; 64 and 4096 tokens;
fp32 and bf16; forward (inference mode) and forward + backward (input and weight gradients).
Every implementation is checked against transformers' eager output (and gradients) first.
Runs alternate between the implementations; the tables give the median time, the ratio of
the fastest transformers implementation to zoo's default, and zoo's achieved GFLOP/s (expert
FLOPs: 6 * slots * hidden * intermediate forward, three times that with the backward) next to
a plain matmul of the same shape, (slots, hidden) @ (hidden, 2 * intermediate), at that dtype.
At few tokens an expert layer is bound by memory, not FLOPs: the last columns give zoo's rate
over the least traffic the layer needs (every expert weight read once, and with the backward
their gradients written once) next to a plain copy of a 256 MB tensor (read + write).

    .venv/bin/python benchmarks/moe_dispatch.py [--repeats 9] [--budget 60] [--threads N]
        [--tokens 64 4096] [--dtypes fp32 bf16]

On a machine shared with other jobs use ``--threads 1``: with more OpenMP threads than free
cores, every matmul waits at barriers for a descheduled thread and times grow 10-20x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

from zoo.architectures.moe.moe_experts import SparseMoeBlock

HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 512, 1024, 8, 2
HF_IMPLEMENTATIONS = ("eager", "batched_mm", "grouped_mm")
ZOO_DISPATCHES = ("split", "grouped_mm")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# batched_mm gathers one [2I, H] weight per token slot: 8192 slots x 2048 x 512 fp32 = 34 GB at 4096 tokens
BATCHED_MM_MAX_TOKENS = 512


def build_layers(dtype: torch.dtype, tokens: int) -> dict[str, torch.nn.Module]:
    """Every implementation, holding copies of the same random weights."""
    torch.manual_seed(0)
    layers: dict[str, torch.nn.Module] = {}
    for impl in HF_IMPLEMENTATIONS:
        if impl == "batched_mm" and tokens > BATCHED_MM_MAX_TOKENS:
            continue
        config = MixtralConfig(
            hidden_size=HIDDEN,
            intermediate_size=INTERMEDIATE,
            num_local_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            experts_implementation=impl,
        )
        layers[f"hf {impl}"] = MixtralSparseMoeBlock(config)
    reference = layers["hf eager"]
    with torch.no_grad():
        reference.gate.weight.normal_(std=HIDDEN**-0.5)
        reference.experts.gate_up_proj.normal_(std=HIDDEN**-0.5)
        reference.experts.down_proj.normal_(std=INTERMEDIATE**-0.5)
    state = reference.state_dict()
    for dispatch in ZOO_DISPATCHES:
        layers[f"zoo {dispatch}"] = SparseMoeBlock(HIDDEN, INTERMEDIATE, EXPERTS, TOP_K, dispatch=dispatch)
    for layer in layers.values():
        layer.load_state_dict(state)
        layer.to(dtype).eval()
    return layers


def make_step(layer: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor, backward: bool) -> Callable[[], tuple]:
    """One timed call: the output (and the gradients when ``backward``)."""
    is_zoo = isinstance(layer, SparseMoeBlock)

    def forward() -> torch.Tensor:
        out = layer(x)
        return out[0] if is_zoo else out

    def step() -> tuple:
        if not backward:
            with torch.inference_mode():
                return (forward(),)
        x.grad = None
        layer.zero_grad(set_to_none=True)
        out = forward()
        out.backward(dy)
        return out.detach(), x.grad, layer.experts.gate_up_proj.grad, layer.experts.down_proj.grad

    return step


def matmul_gflops(dtype: torch.dtype, tokens: int, repeats: int) -> float:
    """Plain (slots, H) @ (H, 2I) matmul throughput, weights stored [2I, H] as nn.Linear's."""
    a = torch.randn(tokens * TOP_K, HIDDEN, dtype=dtype)
    w = torch.randn(2 * INTERMEDIATE, HIDDEN, dtype=dtype)
    (a @ w.t())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ w.t()
        times.append(time.perf_counter() - start)
    return 2 * a.shape[0] * HIDDEN * 2 * INTERMEDIATE / statistics.median(times) / 1e9


def copy_gbps(dtype: torch.dtype, repeats: int) -> float:
    """Memory bandwidth: bytes read + written per second by a copy far larger than the caches."""
    source = torch.ones(256 * 2**20 // torch.finfo(dtype).bits * 8, dtype=dtype)
    target = torch.empty_like(source)
    target.copy_(source)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        times.append(time.perf_counter() - start)
    return 2 * source.numel() * source.element_size() / statistics.median(times) / 1e9


def max_diff(ours: tuple, reference: tuple) -> float:
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(ours, reference))


def run_cell(dtype_name: str, tokens: int, backward: bool, repeats: int, budget: float) -> None:
    dtype = DTYPES[dtype_name]
    layers = build_layers(dtype, tokens)
    torch.manual_seed(1)
    x = torch.randn(1, tokens, HIDDEN, dtype=dtype, requires_grad=backward)
    dy = torch.randn(1, tokens, HIDDEN, dtype=dtype)
    steps = {name: make_step(layer, x, dy, backward) for name, layer in layers.items()}
    reference = steps["hf eager"]()
    scale = max(t.float().abs().max().item() for t in reference)
    warmup: dict[str, float] = {}
    diffs: dict[str, float] = {}
    for name, step in steps.items():  # warm-up run, checked against transformers' eager
        start = time.perf_counter()
        diffs[name] = max_diff(step(), reference) / scale
        warmup[name] = time.perf_counter() - start
    # an equal share of the budget each, so a very slow implementation gets fewer rounds instead
    # of leaving the others too few; the rounds still alternate between implementations
    rounds = {name: max(1, min(repeats, int(budget / len(steps) / warm))) for name, warm in warmup.items()}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_index in range(max(rounds.values())):
        for name, step in steps.items():
            if round_index < rounds[name]:
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    best_hf = min((n for n in median if n.startswith("hf")), key=median.get)
    zoo_default = "zoo split"
    flops = 6 * tokens * TOP_K * HIDDEN * INTERMEDIATE * (3 if backward else 1)
    weight_bytes = sum(p.numel() * p.element_size() for p in layers[zoo_default].experts.parameters())
    traffic = weight_bytes * (2 if backward else 1)
    cells = " | ".join(f"{median[n] * 1e3:.1f}" if n in median else "—" for n in COLUMNS)
    worst = max(diffs.values())
    print(
        f"| {dtype_name} | {tokens} | {'fwd+bwd' if backward else 'fwd'} | {cells} | "
        f"{median[best_hf] / median[zoo_default]:.2f}x ({best_hf.removeprefix('hf ')}) | "
        f"{flops / median[zoo_default] / 1e9:.1f} | {matmul_gflops(dtype, tokens, 5):.1f} | "
        f"{traffic / median[zoo_default] / 1e9:.1f} | {copy_gbps(dtype, 5):.1f} | {worst:.1e} | "
        f"{min(rounds.values())}-{max(rounds.values())} |",
        flush=True,
    )


COLUMNS = [*(f"hf {i}" for i in HF_IMPLEMENTATIONS), *(f"zoo {d}" for d in ZOO_DISPATCHES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds per implementation (fewer if over budget)")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of timed rounds per cell, roughly")
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 4096])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"MoE layer H={HIDDEN} I={INTERMEDIATE} E={EXPERTS} top-{TOP_K}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, CPU {torch.backends.cpu.get_cpu_capability()}, "
        f"native bf16 matmul: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}; median ms"
    )
    header = " | ".join(COLUMNS)
    extra = "best hf / zoo split | zoo GFLOP/s | matmul GFLOP/s | zoo GB/s | copy GB/s | max rel diff | rounds"
    print(f"| dtype | tokens | pass | {header} | {extra} |")
    print("|---" * (len(COLUMNS) + 10) + "|")
    for dtype_name in args.dtypes:
        for tokens in args.tokens:
            for backward in (False, True):
                run_cell(dtype_name, tokens, backward, args.repeats, args.budget)


if __name__ == "__main__":
    main()
