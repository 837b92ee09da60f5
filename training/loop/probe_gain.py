"""What precision auto's probe (`zoo.training.loop.speed`) may spend on a run: as much as it may
save over the run's length, no more.

Before any probe, each setting's expected speed-up over fp32 comes from the device's kind
(`GAIN`: measured on the 2-core EPYC with native bf16, docs/results.md "Training speed", and
compiling on an H200; the other CUDA and compile factors are guesses). A run is probed when
the steps the most promising setting could save over it, ``total_steps * (1 - 1 / speed-up)``, are at least the probe's own
(fp32's steps and that setting's): a threshold that follows the run's length and what the
device may gain, not a fixed number of steps. Once fp32's probe is measured, each further
setting is tried only when what it could save (its expectation times `SLACK`, scaled by how
the settings measured so far compared with theirs, against the fastest so far) over the run is
at least what a probe costs here, as fp32's measured probe did (plus a compile's guess where it
compiles). `PAYBACK` scales the costs (0: every setting, as the tests ask).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from zoo.devices import cpu_features

# Speed-up over fp32 of each switch, by device kind; a setting's is the product of its switches'.
# "cpu-bf16": bf16 autocast 1.42 and channels_last 1.31 (1.86x together) for the CIFAR ResNet-20
# on the 2-core EPYC; "cuda" compile 2.0: the same model's step compiled under CUDA graphs
# ("reduce-overhead", speed.compile_mode) on an H200 (1.99-2.15x eager, results page "On a GPU");
# the CPU's compile and the CUDA precisions are guesses (a launch-bound step gains nothing from them).
GAIN = {
    "cpu-bf16": {"bf16": 1.42, "channels_last": 1.31, "compile": 1.1},
    "cpu": {"channels_last": 1.31, "compile": 1.1},
    "cuda": {"fp16": 1.3, "bf16": 1.25, "tf32": 1.15, "channels_last": 1.05, "compile": 2.0},
}
SLACK = 1.25  # how far a measured speed-up may exceed its expectation
PAYBACK = 1.0  # a probe runs when what it may save is at least this many times what it costs


def device_kind(device: torch.device) -> str:
    if device.type == "cuda":
        return "cuda"
    return "cpu-bf16" if cpu_features().bf16 else "cpu"


def expected_speedup(setting: Any, kind: str) -> float:
    """``setting``'s expected speed-up over fp32 on a device of ``kind`` (1.0 for fp32 itself)."""
    gains = GAIN.get(kind, {})
    switches = [setting.precision] + [n for n in ("tf32", "channels_last", "compile") if getattr(setting, n)]
    return math.prod(gains.get(switch, 1.0) for switch in switches)


def probe_worth_it(total_steps: int, settings: list[Any], kind: str, probe_steps: int) -> str | None:
    """None when a run of ``total_steps`` may save at least ``probe_steps`` steps' time (fp32's
    and the most promising setting's probes, say) at the most promising setting's expected
    speed-up (times `SLACK`); else why it is not probed."""
    best = max((expected_speedup(s, kind) for s in settings[1:]), default=1.0)
    saved = total_steps * (1.0 - 1.0 / (best * SLACK))
    if saved >= PAYBACK * probe_steps:
        return None
    return (
        f"not measured: the probe's {probe_steps} steps would cost more than the {saved:.1f} steps' time "
        f"the most promising setting ({best:.2f}x fp32 expected, {SLACK:g}x that at most) could save over "
        f"this run's {total_steps} steps"
    )


def left_untried(
    setting: Any,
    kind: str,
    total_steps: int,
    measured: list[tuple[Any, float]],
    best_s: float,
    probe_s: float,
    compile_s: float,
) -> str | None:
    """None when ``setting`` may save over the run at least what its probe costs (``probe_s``,
    as fp32's measured probe, plus ``compile_s`` where it compiles); else why it is left: "not
    needed" when even at its best it is no faster than the fastest measured, "not tried" when
    the run is too short to pay for its probe (a longer run may try it).
    ``measured``: (setting, median step seconds) of those probed so far, fp32 first; ``best_s``
    the fastest of them that passed the loss check."""
    reference_s = measured[0][1]
    tried = [(s, t) for s, t in measured[1:] if t > 0]
    scale = statistics.median(reference_s / t / expected_speedup(s, kind) for s, t in tried) if tried else 1.0
    reach_s = reference_s / (expected_speedup(setting, kind) * scale * SLACK)
    saving_s, cost_s = total_steps * (best_s - reach_s), probe_s + (compile_s if setting.compile else 0.0)
    if saving_s <= 0:  # a verdict a longer run would not change
        return (
            f"not needed: at its expected {reference_s / reach_s:.2f}x fp32 at most, it is no faster than the "
            f"fastest measured ({reference_s / best_s:.2f}x)"
        )
    if saving_s >= PAYBACK * cost_s:
        return None
    return (
        f"not tried: at its expected {reference_s / reach_s:.2f}x fp32 at most, it could save "
        f"{saving_s:.1f} s over this run's {total_steps} steps, less than its probe's ~{cost_s:.1f} s"
    )
