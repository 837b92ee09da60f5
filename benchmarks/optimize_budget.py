"""`zoo.optimize("auto")` with its default time budget against the full search, side by side
in one process: wall time of each search, what each picked, and the two picks timed in turn
against each other afterwards (the budgeted pick should be within 5% of the full search's).

    .venv/bin/python benchmarks/optimize_budget.py [--models resnet20.fmnist resnet50] [--batch 16] [--budget 60]
"""

from __future__ import annotations

import argparse
import time

import torch

import zoo
from zoo.deploy.inference import medians
from zoo.devices import has_amx


def search(model: torch.nn.Module, x: torch.Tensor, budget: float | None) -> tuple[object, float]:
    start = time.perf_counter()
    optimized = zoo.optimize(model, x, "auto", cache=False, time_budget_s=budget)
    return optimized, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet20.fmnist", "resnet50"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"AMX {'yes' if has_amx() else 'no'}, {torch.get_num_threads()} threads"
    )
    for name in args.models:
        model = zoo.load(name, pretrained=name != "resnet50")  # resnet50: random weights, speed only
        size = model.pretrained_cfg.get("input_size", (3, 224, 224))
        x = torch.randn(args.batch, *size)
        budgeted, budgeted_s = search(model, x, args.budget)
        full, full_s = search(model, x, None)
        eager_s, budget_pick_s, full_pick_s = medians([model, budgeted, full], (x,), args.repeats)
        print(f"\n{name}, batch {args.batch}")
        print(f"  budget {args.budget:g} s: searched {budgeted_s:.0f} s, picked {budgeted.optimize_report.precision}")
        print(f"  full search:   searched {full_s:.0f} s, picked {full.optimize_report.precision}")
        print(
            f"  the picks timed in turn: eager {eager_s * 1e3:.1f} ms, budgeted pick {budget_pick_s * 1e3:.1f} ms "
            f"({eager_s / budget_pick_s:.2f}x), full pick {full_pick_s * 1e3:.1f} ms ({eager_s / full_pick_s:.2f}x); "
            f"budgeted / full = {full_pick_s / budget_pick_s:.2f}"
        )
        print("  budgeted report:\n    " + str(budgeted.optimize_report).replace("\n", "\n    "))


if __name__ == "__main__":
    main()
