"""`zoo.optimize("auto")` within its default time budget against ONNX Runtime and OpenVINO and
against every candidate its full search would choose from, side by side in one process, on
ResNet-50 (torchvision's, random weights seeded 0, its state dict copied into zoo's ``resnet50``).

In order: the peers are built from torchvision's model with each runtime's own tools (ONNX
Runtime fp32 and static int8, OpenVINO fp32 and NNCF int8, as `zoo.deploy.runtimes` builds
them, calibrated on the example batch: the runtime candidates of auto's full search); auto
searches with ``time_budget_s`` (first, with torch's compile cache in a fresh folder: nothing
compiled before helps it; ``cache=False``: nothing remembered either); then zoo's own
candidates are built as auto builds them (torch's int8, bf16 where native, compiled fp32,
channels_last), or with ``--full-search`` auto's full search runs itself (``time_budget_s=None``;
slower: it times each candidate against eager first). Then every variant is timed call by call
in turn, ``--rounds`` rounds, the order rotated each round. Each row: the seconds it took to build
(or search), median and min ms per batch, top-1 agreement with the reference on the example,
the reference's median over the variant's with its quartiles over the rounds (the run-to-run
noise), and the budgeted pick's time over the variant's in the same round (median and
quartiles; above 1: the budgeted pick is slower). The last lines compare the budgeted pick with
the fastest candidate that agrees (what a full search picks, at best) and with each peer. The
machine, with its load average at the start and the end, heads the output; ``--csv`` writes
the table.

    .venv/bin/python benchmarks/optimize_budget.py [--batch 16] [--budget 60] [--rounds 9] [--repeats 5]
        [--full-search] [--csv results/optimize_budget/x.csv]
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="zoo-inductor-"))  # before torch compiles

import argparse  # noqa: E402
import csv  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402

import zoo  # noqa: E402
from zoo.deploy import inference, runtimes  # noqa: E402
from zoo.deploy.bench import load_average, machine_line, time_in_turn  # noqa: E402

REFERENCE = "torchvision fp32 eager"
BUDGETED = "zoo.optimize auto, budget"
FULL = "zoo.optimize auto, full search"
AGREEMENT = 0.99  # auto's min_agreement: a candidate below it would not be picked


def search(
    model: torch.nn.Module, x: torch.Tensor, budget: float | None, repeats: int
) -> tuple[torch.nn.Module, float]:
    start = time.perf_counter()
    optimized = zoo.optimize(model, x, "auto", cache=False, repeats=repeats, time_budget_s=budget)
    return optimized, time.perf_counter() - start


def zoo_candidates(model: torch.nn.Module, x: torch.Tensor) -> tuple[dict[str, Callable], dict[str, float]]:
    """zoo's own candidates built as auto builds them, each called once (a compile), and the seconds each took."""
    available, _ = inference._candidates(model, (x,), torch.device("cpu"))
    variants, seconds = {}, {}
    for name in [n for n in ("int8", "bf16", "fp32", "channels_last") if n in available]:
        start = time.perf_counter()
        variants[f"zoo {name}"] = built = inference._build(name, model, (x,), [(x,)], available[name])
        with torch.no_grad():
            built(x)
        seconds[f"zoo {name}"] = time.perf_counter() - start
    return variants, seconds


def spread(values: list[float]) -> tuple[float, float, float]:
    """Median and quartiles."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, middle, high = statistics.quantiles(values, n=4, method="inclusive")
    return middle, low, high


def rows(
    times: dict[str, list[float]], picks: dict[str, str], seconds: dict[str, float], agreement: dict[str, float]
) -> list[dict[str, str]]:
    """The table: per variant its medians, ratio to the reference with its quartiles, and the
    budgeted pick's time over its own, round by round."""
    reference, budgeted = times[REFERENCE], times[BUDGETED]
    table = []
    for name, measured in times.items():
        ratio = spread([r / t for r, t in zip(reference, measured)])
        versus = spread([b / t for b, t in zip(budgeted, measured)])
        table.append(
            {
                "variant": name,
                "picked": picks.get(name, ""),
                "built_or_searched_s": f"{seconds[name]:.0f}" if name in seconds else "",
                "median_ms": f"{statistics.median(measured) * 1e3:.1f}",
                "min_ms": f"{min(measured) * 1e3:.1f}",
                "top1_agreement": f"{agreement[name]:.0%}",
                "x_torchvision_eager": f"{ratio[0]:.2f}",
                "x_quartiles": f"{ratio[1]:.2f}-{ratio[2]:.2f}",
                "budgeted_pick_time_over_this": f"{versus[0]:.2f} ({versus[1]:.2f}-{versus[2]:.2f})",
            }
        )
    return table


def verdict(table: list[dict[str, str]]) -> str:
    """The budgeted pick against the fastest candidate that agrees (what a full search picks at
    best) and each peer: faster, within the noise (the quartiles of its time over theirs
    straddle 1), or slower."""
    agreeing = [r for r in table if r["variant"] not in (REFERENCE, BUDGETED) and float(r["top1_agreement"][:-1]) >= 99]
    fastest = min(agreeing, key=lambda r: float(r["median_ms"]), default=None)
    lines = [
        f"  the fastest that agrees with fp32 (a full search's best pick): {fastest['variant'] if fastest else '-'}"
    ]
    for row in table:
        if row["variant"] in (REFERENCE, BUDGETED):
            continue
        median, quartiles = row["budgeted_pick_time_over_this"].split(" ")
        low, high = (float(q) for q in quartiles.strip("()").split("-"))
        what = "faster" if high < 1 else "slower" if low > 1 else "within the run-to-run noise"
        lines.append(f"  budgeted pick against {row['variant']}: {median} of its time per batch, {what}")
    return "\n".join(["", *lines])


def build(args: argparse.Namespace, reference: torch.nn.Module, model: torch.nn.Module, x: torch.Tensor) -> tuple:
    """Every variant, by label, the seconds each took, and auto's picks."""
    variants, seconds = runtimes.build_peers(reference, (x,), [(x,)])
    budgeted, seconds[BUDGETED] = search(model, x, args.budget, args.repeats)
    print(
        f"\nbudgeted search ({seconds[BUDGETED]:.0f} s, load {load_average()}):\n{budgeted.optimize_report}", flush=True
    )
    variants[BUDGETED], picks = budgeted, {BUDGETED: budgeted.optimize_report.precision}
    if args.full_search:
        variants[FULL], seconds[FULL] = search(model, x, None, args.repeats)
        picks[FULL] = variants[FULL].optimize_report.precision
        print(
            f"\nfull search ({seconds[FULL]:.0f} s, load {load_average()}):\n{variants[FULL].optimize_report}",
            flush=True,
        )
    else:
        more, more_seconds = zoo_candidates(model, x)
        variants, seconds = {**variants, **more}, {**seconds, **more_seconds}
        print(f"\nzoo's candidates built ({', '.join(f'{k} {v:.0f} s' for k, v in more_seconds.items())})", flush=True)
    return {REFERENCE: reference, **variants}, seconds, picks


@torch.no_grad()
def agreements(variants: dict[str, Callable], x: torch.Tensor) -> dict[str, float]:
    expected = variants[REFERENCE](x).argmax(-1)
    return {name: (run(x).argmax(-1) == expected).float().mean().item() for name, run in variants.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeats", type=int, default=5, help="zoo.optimize's repeats (its default: 5)")
    parser.add_argument("--full-search", action="store_true", help="run auto's full search instead of building")
    parser.add_argument("--csv", type=Path, help="write the table here")
    args = parser.parse_args()
    started = time.perf_counter()
    print(machine_line(), flush=True)
    torch.manual_seed(0)
    reference = torchvision.models.resnet50().eval()
    model = zoo.load("resnet50", pretrained=False).eval()
    model.load_state_dict(reference.state_dict())
    x = torch.randn(args.batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    variants, seconds, picks = build(args, reference, model, x)
    table = rows(time_in_turn(variants, x, args.rounds), picks, seconds, agreements(variants, x))
    print(f"\nResNet-50, batch {args.batch}, budget {args.budget:g} s, {args.rounds} rounds in turn:")
    print("| " + " | ".join(table[0]) + " |\n|" + "---|" * len(table[0]))
    for row in table:
        print("| " + " | ".join(row.values()) + " |")
    print(verdict(table))
    print(f"\nload average at the end: {load_average()} (1, 5, 15 min); {time.perf_counter() - started:.0f} s in all")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)


if __name__ == "__main__":
    main()
