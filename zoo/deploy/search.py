"""Auto's budgeted search (`zoo.optimize(..., time_budget_s=...)`): which candidates to build and
time first, what each is expected to cost, and when to stop.

Before anything is timed, each candidate gets an expected speed-up over fp32 eager and an
expected cost (seconds to build, check and time it) from what is known already:

- the CPU's kind (`Machine`: AMX, AVX-512 with native bf16, VNNI, AVX2) and the model's operator
  mix (`ModelProfile.kind`: mostly convolutions, or linear and attention layers): `PRIORS`,
  measured on such machines (docs/results.md) or, where marked, guessed;
- what this machine measured before for a similar model (same kind, parameters, sample size and
  batch each within a factor `SIMILAR` of this one's): every search with ``cache`` remembers its
  speed-ups and costs in ``$ZOO_HOME/optimize_speeds.json``, keyed by the machine; they replace
  the priors they cover.

The candidates are tried most promising first. Before each, the stop rule (`left_untried`)
leaves it untried when it cannot be expected to beat the best that passed so far (its expected
speed-up, times how the measured ones compared with theirs, times `SLACK`: the priors' error),
or when its expected cost (times how the measured costs of its kind, a runtime's or torch's
own, compared with theirs), with the final round's, would take the search past the budget; the
first one is always tried. The report says what was left and why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from zoo.deploy import runtimes
from zoo.deploy.optimize_report import Candidate, read_entry, write_entry
from zoo.devices import cpu_features

SPEEDS_FILE = "optimize_speeds.json"
SLACK = {"prior": 1.5, "remembered": 1.25}  # how far a measured speed-up may exceed its expectation
SIMILAR = 4.0  # a remembered model is similar within this factor of parameters, sample size and batch
MAX_REMEMBERED = 64  # models remembered per machine (the oldest go first)

# Expected speed-up over fp32 eager, by CPU kind and model kind. Measured ones: ResNet-50 at batch
# 16 (docs/results.md): "avx512-bf16" on a 2-core AMD EPYC (AVX-512 BF16, VNNI), "avx2" on an AVX2
# EPYC (int8 and compiled fp32) and on the AVX-512 EPYC capped to AVX2 (OpenVINO's, which the cap
# reaches, 2026-11-29; ONNX Runtime's are guesses: no cap reaches its kernels), "amx" on a 2-core
# Xeon with AMX (every candidate, a full search, 2026-11-28), "cuda" on an H200 at batch 64. The "dense"
# rows (linear layers and attention: torch's int8 does not apply) are guesses.
_CONV_AVX512 = {"openvino-int8": 10.2, "int8": 9.2, "onnxruntime-int8": 8.6, "bf16": 5.0, "openvino": 2.55}
_CONV_AVX512 |= {"onnxruntime": 2.55, "fp32": 2.24, "channels_last": 1.22}
_DENSE = {"openvino-int8": 2.5, "onnxruntime-int8": 2.0, "bf16": 2.0, "openvino": 1.4, "onnxruntime": 1.3, "fp32": 1.2}
PRIORS: dict[tuple[str, str], dict[str, float]] = {
    ("avx512-bf16", "conv"): _CONV_AVX512,
    ("avx512-vnni", "conv"): _CONV_AVX512,
    ("avx512", "conv"): {**_CONV_AVX512, "openvino-int8": 5.0, "int8": 4.5, "onnxruntime-int8": 3.0},
    ("avx2", "conv"): {"openvino-int8": 4.3, "int8": 3.9, "onnxruntime-int8": 2.5, "openvino": 1.95}
    | {"onnxruntime": 2.0, "fp32": 1.93, "channels_last": 1.1},
    ("amx", "conv"): {"openvino-int8": 13.6, "int8": 11.3, "onnxruntime-int8": 7.6, "bf16": 6.95, "openvino": 2.45}
    | {"onnxruntime": 2.04, "fp32": 2.0, "channels_last": 1.19},
    ("cuda", "conv"): {"fp16": 3.0, "bf16": 2.8, "fp32": 1.3, "channels_last": 1.2},
    ("avx512-bf16", "dense"): _DENSE,
    ("avx512-vnni", "dense"): _DENSE,
    ("avx512", "dense"): {**_DENSE, "openvino-int8": 1.8, "onnxruntime-int8": 1.5},
    ("avx2", "dense"): {**_DENSE, "openvino-int8": 1.6, "onnxruntime-int8": 1.4},
    ("amx", "dense"): {**_DENSE, "bf16": 4.0, "openvino-int8": 3.0},
    ("cuda", "dense"): {"fp16": 2.0, "bf16": 1.9, "fp32": 1.1},
}
# What building a candidate costs: seconds, plus calls of the eager model it takes as long as
# (quantizers calibrate and correct, compilers trace); the exporters' share (ONNX export, OpenVINO
# conversion) is paid once per runtime. Fitted to resnet20.fmnist and ResNet-50 at batch 16 on the
# 2-core EPYC (2026-11-28, an eager ResNet-50 call taken as 0.6 s).
BUILD_COST = {
    "openvino-int8": (11.0, 38.0),  # NNCF's full bias correction runs the model layer by layer
    "onnxruntime-int8": (3.0, 24.0),
    "int8": (22.0, 16.0),
    "bf16": (13.0, 6.0),
    "fp32": (10.0, 7.0),
    "fp16": (10.0, 7.0),
    "openvino": (0.1, 4.0),
    "onnxruntime": (0.1, 4.0),
    "channels_last": (0.0, 0.0),
}
CONVERSION_COST = {"openvino": (3.0, 2.0), "onnxruntime": (3.0, 3.0)}  # export or convert, once per runtime


@dataclass(frozen=True)
class Machine:
    """What decides which candidate wins here: the device, torch's CPU capability, native bf16,
    AMX, VNNI; and the threads."""

    device: str = "cpu"
    capability: str = "DEFAULT"
    bf16: bool = False
    amx: bool = False
    vnni: bool = False
    threads: int = 1

    @classmethod
    def here(cls, device: torch.device) -> Machine:
        if device.type == "cuda":
            return cls(torch.cuda.get_device_name(device), "cuda", torch.cuda.is_bf16_supported(), threads=1)
        cpu = cpu_features()
        return cls("cpu", cpu.capability, cpu.bf16, cpu.amx, cpu.vnni, torch.get_num_threads())

    @property
    def kind(self) -> str:
        """``cuda``, ``amx``, ``avx512-bf16``, ``avx512-vnni``, ``avx512`` or ``avx2`` (the rest)."""
        if self.capability == "cuda":
            return "cuda"
        if self.amx:
            return "amx"
        if self.capability.startswith("AVX512"):
            return "avx512-bf16" if self.bf16 else "avx512-vnni" if self.vnni else "avx512"
        return "avx2"

    def key(self) -> str:
        """The machine's key in the speeds file (with torch's and the runtimes' versions)."""
        return (
            f"{self.device}|{self.capability}|bf16={self.bf16}|amx={self.amx}|vnni={self.vnni}|{self.threads} threads"
            f"|torch {torch.__version__}|{runtimes.versions()}"
        )


@dataclass(frozen=True)
class ModelProfile:
    """What makes two models alike for the search: their kind (``conv`` when they have at least
    as many convolutions as linear and attention layers, else ``dense``), parameters, numbers per
    sample of the input, and batch size."""

    kind: str
    params: int
    sample: int
    batch: int

    @classmethod
    def of(cls, model: nn.Module, args: tuple[Any, ...]) -> ModelProfile:
        layers = list(model.modules())
        conv = sum(isinstance(m, nn.modules.conv._ConvNd) for m in layers)
        dense = sum(isinstance(m, nn.Linear | nn.MultiheadAttention) for m in layers)
        first = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].ndim else None
        return cls(
            "conv" if conv and conv >= dense else "dense",
            sum(p.numel() for p in model.parameters()),
            first[0].numel() if first is not None and len(first) else 0,
            len(first) if first is not None else 1,
        )

    def distance(self, other: ModelProfile) -> float:
        """How far apart in log scale (inf for another kind)."""
        if self.kind != other.kind:
            return math.inf
        pairs = ((self.params, other.params), (self.sample, other.sample), (self.batch, other.batch))
        return max(abs(math.log(max(a, 1) / max(b, 1))) for a, b in pairs)


@dataclass
class Plan:
    """The candidates in the order to try them, each one's expected speed-up, the most it may
    reach (``reach``: the expectation times its error), its expected cost, and where the
    expectations come from (``source``: ``prior`` or ``remembered``)."""

    order: list[str]
    expected: dict[str, float]
    costs: dict[str, float]
    source: str
    described: str
    reach: dict[str, float] = field(default_factory=dict)
    eager_s: float = 0.0
    final_calls: int = 0  # calls of each candidate in the final round


def plan(
    names: list[str],
    machine: Machine,
    profile: ModelProfile,
    eager_s: float,
    calls: int,
    known: dict | None = None,
    final_calls: int = 0,
) -> Plan:
    """The search's plan for ``names``: most promising first (ties: cheapest first); ``calls``
    is how many eager calls checking and timing one candidate takes, ``known`` what this
    machine remembered for a similar model (`similar`), ``final_calls`` how many calls of each
    the final round takes."""
    priors = PRIORS.get((machine.kind, profile.kind), {})
    remembered_speed = (known or {}).get("speedups", {})
    common = [n for n in names if n in remembered_speed and n in priors]
    scale = statistics.median(remembered_speed[n] / priors[n] for n in common) if common else 1.0
    expected, reach = {}, {}
    for name in names:
        prior = priors.get(name, 1.0) * scale
        expected[name] = remembered_speed.get(name, prior)
        # a remembered speed-up orders the search; one measured under a burst of load does not
        # alone rule a candidate out: it may still reach what the prior says it may
        reach[name] = max(
            expected[name] * SLACK["remembered"] if name in remembered_speed else 0, prior * SLACK["prior"]
        )
    cost_ratio = (known or {}).get("cost_ratio", {})
    costs = {n: expected_cost(n, eager_s, calls, expected[n]) * cost_ratio.get(n, 1.0) for n in names}
    order = sorted(names, key=lambda n: (-expected[n], costs[n]))
    source = "remembered" if remembered_speed else "prior"
    described = f"{machine.kind} CPU" if machine.kind != "cuda" else "CUDA GPU"
    described = f"expectations for {profile.kind} models on an {described}" + (
        ", and what this machine measured for a similar model" if remembered_speed else ""
    )
    return Plan(order, expected, costs, source, described, reach, eager_s, final_calls)


def expected_cost(name: str, eager_s: float, calls: int, speedup: float, converted: bool = False) -> float:
    """Seconds to build ``name``, check it and time it (``calls`` calls of it and of eager)."""
    fixed, build_calls = BUILD_COST.get(name, (10.0, 8.0))
    runtime = runtimes.runtime_of(name) if name in runtimes.RUNTIMES else None
    if runtime and not converted:
        fixed, build_calls = fixed + CONVERSION_COST[runtime][0], build_calls + CONVERSION_COST[runtime][1]
    return fixed + (build_calls + calls * (1.0 + 1.0 / max(speedup, 1e-3))) * eager_s


def left_untried(
    name: str, search: Plan, measured: list[Candidate], costs: dict[str, float], elapsed: float, budget: float | None
) -> str | None:
    """Why ``name`` is left untried now (None: try it): it cannot be expected to beat the best
    that passed so far, or its cost would take the search past ``budget``. ``measured`` are the
    candidates tried (eager first), ``costs`` what each cost (seconds)."""
    timed = [c for c in measured[1:] if c.speedup and c.name in search.expected]
    if budget is None or not timed:
        return None  # no budget: every one; else the first one always
    scale = statistics.median(c.speedup / search.expected[c.name] for c in timed)
    best = max((c for c in measured if c.passed and c.speedup), key=lambda c: c.speedup, default=measured[0])
    reach = search.reach[name] * scale
    if reach <= (best.speedup or 1.0):
        return (
            f"not tried: expected {search.expected[name] * scale:.2g}x, at most {reach:.2g}x, not above "
            f"{best.name}'s {best.speedup or 1.0:.2f}x measured; time_budget_s=None tries all"
        )
    cost = search.costs[name] * _cost_scale(name, search, costs)
    final = _final_round_cost(name, search, measured)
    if elapsed + cost + final > budget:
        return (
            f"not tried: expected to cost {cost + final:.0f} s with the final round, {max(budget - elapsed, 0):.0f} s "
            f"of auto's time budget ({budget:g} s) left; time_budget_s=None tries all"
        )
    return None


def _cost_scale(name: str, search: Plan, costs: dict[str, float]) -> float:
    """How the tried candidates' costs compared with their expectations: those of the same kind
    (a runtime's, or torch's own) when any was tried; else all of them, but never below 1 (a
    runtime built fast says little about how fast torch's quantizer or compiler runs here)."""
    tried = [n for n in costs if n in search.costs and search.costs[n] > 0]
    same = [n for n in tried if (n in runtimes.RUNTIMES) == (name in runtimes.RUNTIMES)]
    if same:
        return sum(costs[n] for n in same) / sum(search.costs[n] for n in same)
    return max(sum(costs[n] for n in tried) / sum(search.costs[n] for n in tried), 1.0) if tried else 1.0


def _final_round_cost(name: str, search: Plan, measured: list[Candidate]) -> float:
    """Seconds of the final round (eager and every passed candidate timed in turn,
    ``search.final_calls`` calls each) once ``name`` is tried too: part of the budget, which the
    search must leave room for."""
    passed = [c for c in measured[1:] if c.passed and c.speedup]
    per_call = 1.0 + sum(1.0 / c.speedup for c in passed) + 1.0 / max(search.expected.get(name, 1.0), 1e-3)
    return search.final_calls * per_call * search.eager_s


def run(
    search: Plan,
    measure: Callable[[str], Candidate],
    eager: Candidate,
    clock: Callable[[], float],
    budget: float | None,
) -> tuple[list[Candidate], dict[str, float]]:
    """Try ``search.order`` under the stop rule (every one when ``budget`` is None): the
    candidates (eager first, then in the order tried or left) and the seconds each tried one
    cost. ``clock`` gives the seconds spent so far."""
    measured, costs = [eager], {}
    for name in search.order:
        reason = left_untried(name, search, measured, costs, clock(), budget)
        if reason is not None:
            measured.append(Candidate(name, note=reason))
            continue
        started = clock()
        measured.append(measure(name))
        costs[name] = clock() - started
        if name in runtimes.RUNTIMES:  # the runtime's other candidate no longer pays for the conversion
            _converted(search, runtimes.runtime_of(name), set(costs))
    return measured, costs


def _converted(search: Plan, runtime: str, tried: set[str]) -> None:
    fixed, calls = CONVERSION_COST[runtime]
    for name in set(search.costs) - tried:
        if name in runtimes.RUNTIMES and runtimes.runtime_of(name) == runtime:
            search.costs[name] = max(search.costs[name] - fixed - calls * search.eager_s, 0.0)


def summary(search: Plan, measured: list[Candidate], spent: float, budget: float) -> str:
    """The report's line on the search: budget, time spent, order and what was left untried."""
    gain = [c.name for c in measured if c.note.startswith("not tried") and " not above " in c.note]
    budget_left = [c.name for c in measured if c.note.startswith("not tried") and c.name not in gain]
    parts = [f"{', '.join(gain)} for their expected gain"] if gain else []
    parts += [f"{', '.join(budget_left)} for the budget"] if budget_left else []
    return (
        f"budgeted search: {spent:.0f} s of {budget:g} s; in order of {search.described}: "
        f"{', '.join(search.order)}; left untried: {'; '.join(parts) or 'none'}"
    )


def similar(machine: Machine, profile: ModelProfile) -> dict | None:
    """What this machine measured for the most similar model it remembers, or None."""
    entries = read_entry(machine.key(), SPEEDS_FILE)
    best, distance = None, math.log(SIMILAR)
    for entry in entries if isinstance(entries, list) else []:
        try:
            other = ModelProfile(**entry["profile"])
            speedups = {str(k): float(v) for k, v in entry["speedups"].items() if math.isfinite(float(v)) and v > 0}
            ratios = {str(k): float(v) for k, v in entry.get("cost_ratio", {}).items() if 0.05 < float(v) < 20}
        except (TypeError, KeyError, ValueError, AttributeError):
            continue  # an entry this version cannot read
        if (d := profile.distance(other)) <= distance:
            best, distance = {"speedups": speedups, "cost_ratio": ratios}, d
    return best


def remember(
    machine: Machine, profile: ModelProfile, search: Plan, measured: list[Candidate], costs: dict[str, float]
) -> None:
    """Keep what this search measured for later searches on similar models."""
    speedups = {c.name: c.speedup for c in measured[1:] if c.speedup}
    if not speedups:
        return
    ratios = {n: costs[n] / search.costs[n] for n in costs if search.costs.get(n)}

    def update(entries: Any) -> list:
        entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        same = next((e for e in entries if e.get("profile") == vars(profile)), {})
        entry = {"profile": vars(profile), "speedups": {**_dict(same, "speedups"), **speedups}}
        entry["cost_ratio"] = {**_dict(same, "cost_ratio"), **ratios}  # what was not measured now is kept
        return [*(e for e in entries if e is not same), entry][-MAX_REMEMBERED:]

    write_entry(machine.key(), update, SPEEDS_FILE)


def _dict(entry: dict, name: str) -> dict:
    value = entry.get(name)
    return value if isinstance(value, dict) else {}
