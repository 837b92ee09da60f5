"""`optimize`: the fastest inference path for a model, measured on this machine.

Candidates are fp32 eager (the reference, always kept, so "auto" is never slower), fp32 eager
in channels_last (4-D inputs), fp32 through ``torch.compile`` (inductor with freezing), bf16
autocast + compile where the hardware runs bf16 natively (fp16 too on a GPU), and static int8
post-training quantization through PT2E (torchao's x86 quantizer, then inductor with freezing)
for the convolutional image families (`ArchSpec.int8`). Each is checked against fp32 eager on the calibration
batches (top-1 agreement for classifiers, a relative tolerance otherwise) and timed on the
example input's shape in turn with fp32 eager; "auto" keeps the one with the largest speed-up
that passes and remembers the choice per machine, model and input shape in
``$ZOO_HOME/optimize.json`` (`zoo.deploy.optimize_report`). The result is an
`zoo.deploy.optimized.OptimizedModel`, which says how a compiled CNN serves other batch sizes.

BatchNorm is folded into the preceding convolution by the graph passes, not by walking the
module tree: inductor's freezing folds conv-bn on the traced data flow, and PT2E's
``prepare_pt2e`` folds it before quantizing. The module tree does not say which layer feeds
which (DenseNet's BatchNorm comes before its convolution), the traced graph does.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import statistics
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn

from zoo.architectures import ARCHS
from zoo.bounds import Bounds
from zoo.deploy import runtimes as runtime_candidates
from zoo.deploy import search
from zoo.deploy.exporter import output_tensors
from zoo.deploy.int8 import has_torchao, quantize_int8
from zoo.deploy.optimize_report import PRECISIONS, Candidate, OptimizeReport, remembered, write_cache
from zoo.deploy.optimized import MAX_BATCH_GRAPHS, OptimizedModel
from zoo.devices import cpu_features, model_device
from zoo.errors import InvalidArgumentError
from zoo.store import weight_entries

# Largest relative output difference (max |diff| / max |fp32|) that passes for outputs that are not class scores.
RELATIVE_TOLERANCE = {"eager": 0.0, "channels_last": 1e-4, "fp32": 1e-3, "bf16": 5e-2, "fp16": 1e-2, "int8": 1e-1}
RELATIVE_TOLERANCE.update(runtime_candidates.RELATIVE_TOLERANCE)
# what ``precision`` may name: the precisions, and a runtime candidate measured alone
CHOICES = (*PRECISIONS, *runtime_candidates.RUNTIMES)
_WARMUP_CALLS = 2  # the first call of a compiled candidate compiles it
TIME_BUDGET_S = 60.0  # auto's default bound on its search (seconds)
TIME_BUDGET = Bounds(1, 7 * 24 * 3600)


def optimize(
    model: nn.Module,
    example_input: Any,
    precision: str = "auto",
    calibration: Iterable[Any] | torch.Tensor | None = None,
    *,
    min_agreement: float = 0.99,
    cache: bool = True,
    repeats: int = 5,
    max_batch_graphs: int = MAX_BATCH_GRAPHS,
    runtimes: bool = True,
    time_budget_s: float | None = TIME_BUDGET_S,
) -> OptimizedModel:
    """The model made fast for inference on this machine, with the same call signature.

    ``example_input`` is a batch like the ones you will run (a tensor, or a tuple of positional
    arguments): candidates are timed on its shape. ``calibration`` (an iterable of such
    batches, or one tensor) calibrates int8 and is what every candidate is checked on against
    fp32 eager; without it, ``example_input`` is. ``precision``: ``"fp32"``, ``"bf16"`` (a CPU
    with native bf16, or a GPU), ``"fp16"`` (a GPU), ``"int8"`` (CNN families, CPU, needs
    torchao: ``pip install zoo[int8]``) or ``"auto"``: the fastest candidate whose top-1
    agreement with fp32 is at least ``min_agreement`` (a relative tolerance for outputs that
    are not class scores); fp32 eager is a candidate, so auto is never slower. ``cache`` keeps
    auto's choice in ``$ZOO_HOME/optimize.json`` so a later call times only that candidate.
    A compiled CNN compiles a graph (seconds each) for each of its first ``max_batch_graphs``
    batch sizes, the example's first, and runs other sizes on those, split and padded: pass 1
    when every batch is the example's size or smaller (a last partial batch is then padded).

    On the CPU, ``runtimes`` (True) adds ONNX Runtime and OpenVINO where they are installed
    (``pip install 'zoo[onnx]'``, ``'zoo[openvino]'``; `zoo.deploy.runtimes`): ``"onnxruntime"``,
    ``"onnxruntime-int8"``, ``"openvino"`` and ``"openvino-int8"``, each checked and timed like
    the others (a name may also be ``precision``, measured alone); the report lists those that are
    not installed with the extra to install. Each candidate is built once (a compile, export or
    conversion), called ``2 + repeats`` times in its check and again in the final round;
    ``runtimes=False`` leaves the runtimes out. ``time_budget_s`` bounds auto's search
    (`zoo.deploy.search`: the likely winners here first, each only while it may beat the best
    so far and fits; the report says what it left; ``None``: all); the result has ``optimize_report``."""
    _check_options(model, precision, min_agreement, repeats, max_batch_graphs, time_budget_s)
    model.eval()
    args = _example_args(example_input)
    device = model_device(model)
    batches = _check_batches(calibration, args)
    available, unavailable = _candidates(model, args, device)
    more, missing = runtime_candidates.candidates(args, device, runtimes or precision in runtime_candidates.RUNTIMES)
    available, unavailable = {**available, **more}, {**unavailable, **missing}
    auto = precision == "auto"
    if not auto and precision not in available:
        raise InvalidArgumentError(f"precision={precision!r} does not apply here: {unavailable[precision]}")
    trials = _Trials(model, args, batches, available, repeats, min_agreement, not auto, time_budget_s if auto else None)
    report = OptimizeReport("eager", 1.0, [], cpu_features().capability, cpu_features().amx, str(device))
    report.cache_key = _cache_key(model, args, device, report, available)
    if auto:
        chosen = _choose_auto(trials, report, unavailable, cache)
    else:
        chosen = _measure_precision(trials, precision, report, unavailable)
    report.precision, report.speedup = chosen.name, chosen.speedup or 1.0
    result = trials.built[chosen.name]
    result.max_batch_graphs = max_batch_graphs
    result.optimize_report = report
    return result


def _check_finite_references(references: list[Any]) -> None:
    """fp32 eager's outputs are what every candidate is checked against: NaN or infinite ones
    (NaN weights, or such an input) leave nothing to compare, said before any candidate is built."""
    for tensor in (t for out in references for t in (out if isinstance(out, (tuple, list)) else [out])):
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise InvalidArgumentError(
                "zoo.optimize: the model's own fp32 outputs on the example (or calibration) input are NaN or "
                "infinite, so no candidate can be checked against them; check its weights "
                "(any(p.isnan().any() for p in model.parameters())) and the input"
            )


def _check_options(
    model: Any, precision: str, min_agreement: float, repeats: int, max_batch_graphs: int, time_budget_s: float | None
) -> None:
    if not isinstance(model, nn.Module):
        shown = f"zoo.load({model!r:.60})" if isinstance(model, str) else "zoo.load(NAME)"
        raise InvalidArgumentError(
            f"zoo.optimize takes a model (a torch nn.Module), got {type(model).__name__}: zoo.optimize({shown}, x)"
        )
    if time_budget_s is not None and (problem := TIME_BUDGET.problem(time_budget_s)):
        raise InvalidArgumentError(f"time_budget_s {problem} (seconds), or None for no limit; got {time_budget_s!r}")
    if precision not in CHOICES:
        raise InvalidArgumentError(f"precision={precision!r} is not one of {', '.join(map(repr, CHOICES))}")
    if not 0.0 < min_agreement <= 1.0:
        raise InvalidArgumentError(f"min_agreement is a fraction in (0, 1], got {min_agreement!r}")
    if repeats < 1:
        raise InvalidArgumentError(f"repeats must be 1 or more, got {repeats!r}")
    if isinstance(max_batch_graphs, bool) or not (isinstance(max_batch_graphs, int) and max_batch_graphs >= 1):
        raise InvalidArgumentError(f"max_batch_graphs must be an int of 1 or more, got {max_batch_graphs!r}")


class _Trials:
    """The candidates built and measured against fp32 eager (its outputs on the calibration
    ``batches`` are the references; its time on ``args`` the baseline). ``strict``: a candidate
    that fails raises (one precision asked for), else it is recorded as failed (auto)."""

    def __init__(
        self,
        model: nn.Module,
        args: tuple[Any, ...],
        batches: list[tuple[Any, ...]],
        available: dict[str, Any],
        repeats: int,
        min_agreement: float,
        strict: bool,
        budget: float | None = None,
    ) -> None:
        self.model, self.args, self.batches, self.available = model, args, batches, available
        self.repeats, self.min_agreement, self.strict = repeats, min_agreement, strict
        self.device = model_device(model)
        self.budget, self.started = budget, time.perf_counter()
        with torch.no_grad():
            self.references = [model(*batch) for batch in batches]
        _check_finite_references(self.references)
        self.classifier = _is_classifier(model, self.references[0])
        warmup = _WARMUP_CALLS
        if budget is not None:  # eager is warm: time one call, and as many more as 10% of the budget allows
            (first_s,) = medians([model], args, 1, self.device, warmup=0)
            self.repeats, warmup = max(1, min(repeats, int(0.1 * budget / first_s))), 0
        (baseline_s,) = medians([model], args, self.repeats, self.device, warmup=warmup)
        self.eager = Candidate("eager", baseline_s, 1.0, 1.0 if self.classifier else None, 0.0, passed=True)
        self.built: dict[str, nn.Module] = {"eager": OptimizedModel(model, model)}
        self.paired_eager_s: dict[str, float] = {}  # fp32 eager's median timed in turn with each candidate

    def measure(self, names: Iterable[str]) -> list[Candidate]:
        """fp32 eager, then each of ``names`` built and measured."""
        return [self.eager, *(self._measured(name) for name in names)]

    def final_round(self, passed: list[Candidate]) -> None:
        """Time fp32 eager and every candidate that passed in turn, in one interleaved round,
        and give each its median from it: the choice is made on one consistent measurement,
        not on pairs timed minutes apart under different load."""
        others = [c for c in passed if c.name != "eager"]
        if not others:
            return
        runs = [self.model, *(self.built[c.name] for c in others)]
        times = medians(runs, self.args, self.repeats, self.device)
        self.eager.median_s = times[0]
        for candidate, seconds in zip(others, times[1:]):
            candidate.median_s = seconds

    def elapsed(self) -> float:
        """Seconds since the trials began (eager's references and timing included)."""
        return time.perf_counter() - self.started

    def _measured(self, name: str) -> Candidate:
        candidate = Candidate(name)
        try:
            self.built[name] = built = _build(name, self.model, self.args, self.batches, self.available[name])
            candidate.top1_agreement, candidate.max_abs_diff = _compare(
                self.classifier, self.references, self.batches, built
            )
            with torch.no_grad():
                for _ in range(_WARMUP_CALLS):  # its warm-up alone: eager is warm already
                    built(*self.args)
            eager_s, candidate.median_s = medians([self.model, built], self.args, self.repeats, self.device, warmup=0)
            candidate.speedup = eager_s / candidate.median_s  # against eager timed alongside it
            self.paired_eager_s[name] = eager_s
            candidate.passed, candidate.note = _passes(name, candidate, self.references, self.min_agreement)
        except Exception as error:  # noqa: BLE001 - auto records a candidate that fails and goes on
            if self.strict:
                raise
            candidate.note = f"failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
        return candidate


def pick(candidates: list[Candidate]) -> Candidate:
    """The fastest candidate that passed, by the medians of one measurement: each one's
    ``speedup`` is fp32 eager's median over its own, both from that measurement, so the pick
    and the report's figures agree (fp32 eager passes by definition)."""
    eager = next(c for c in candidates if c.name == "eager")
    passed = [c for c in candidates if c.passed and c.median_s]
    for c in passed:
        c.speedup = eager.median_s / c.median_s
    return min(passed, key=lambda c: c.median_s)


def _measure_precision(
    trials: _Trials, precision: str, report: OptimizeReport, unavailable: dict[str, str]
) -> Candidate:
    """The one precision asked for, measured; a warning (at `optimize`'s caller) where it fails the check.
    The report's fp32 eager is the one timed in turn with it, so its speed-up is their medians' ratio."""
    eager, chosen = trials.measure([precision])
    eager = dataclasses.replace(eager, median_s=trials.paired_eager_s.get(precision, eager.median_s))
    report.candidates = [eager, chosen] + [Candidate(n, note=reason) for n, reason in unavailable.items()]
    if not chosen.passed:
        warnings.warn(f"optimize(precision={precision!r}): {chosen.note}; compare with precision='auto'", stacklevel=3)
    return chosen


def _choose_auto(trials: _Trials, report: OptimizeReport, unavailable: dict[str, str], cache: bool) -> Candidate:
    """The candidate remembered for this key, if it still passes; else the fastest that passes of
    those measured now (remembered when ``cache``). A full search's choice serves a budgeted
    search too; a budgeted one's only another budgeted one."""
    budgeted = trials.budget is not None
    keys = [report.cache_key + "|full"] + ([report.cache_key] if budgeted else [])
    report.cache_key = keys[-1]  # where this search's choice is remembered
    for choice in filter(None, (remembered(key) for key in keys) if cache else ()):
        if choice[0] not in trials.available:
            continue
        chosen = trials.measure([choice[0]] if choice[0] != "eager" else [])[-1]
        if chosen.passed:  # the report is the earlier call's, so is the speed-up
            report.candidates, report.cached = choice[1], True
            return next((c for c in choice[1] if c.name == chosen.name and c.speedup), chosen)
        break
    measured, plan = _search(trials, [n for n in trials.available if n != "eager"], cache)
    passed = [c for c in measured if c.passed and c.name != "eager"]
    if budgeted and len(passed) == 1:  # its pair with eager is one consistent measurement already
        trials.eager.median_s = trials.paired_eager_s[passed[0].name]
    else:
        trials.final_round([c for c in measured if c.passed])
    if budgeted:
        report.search = search.summary(plan, measured, trials.elapsed(), trials.budget)
    report.candidates = measured + [Candidate(n, note=reason) for n, reason in unavailable.items()]
    chosen = pick(report.candidates)
    if cache:
        write_cache(keys[-1], chosen.name, report.candidates)
    return chosen


def _search(trials: _Trials, names: list[str], cache: bool) -> tuple[list[Candidate], search.Plan]:
    """fp32 eager and ``names`` measured, or left untried by a budgeted search's stop rule
    (`zoo.deploy.search`), which tries the most promising first; what was measured is
    remembered for later searches on similar models (with ``cache``)."""
    machine, profile = search.Machine.here(trials.device), search.ModelProfile.of(trials.model, trials.args)
    calls = 2 + trials.repeats + len(trials.batches)  # a check, then the timing in turn with eager
    known = search.similar(machine, profile) if cache else None
    plan = search.plan(names, machine, profile, trials.eager.median_s, calls, known, final_calls=trials.repeats)
    measured, costs = search.run(plan, trials._measured, trials.eager, trials.elapsed, trials.budget)
    if cache:
        search.remember(machine, profile, plan, measured, costs)
    return measured, plan


def unavailable_precisions(model: nn.Module, example_input: Any) -> dict[str, str]:
    """Why each precision that does not apply to ``model`` on ``example_input`` here does not."""
    return _candidates(model, _example_args(example_input), model_device(model))[1]


def _candidates(model: nn.Module, args: tuple[Any, ...], device: torch.device) -> tuple[dict[str, Any], dict[str, str]]:
    """The candidates that apply here (name -> autocast dtype or None), and why the others don't."""
    available: dict[str, Any] = {"eager": None, "fp32": None}
    unavailable: dict[str, str] = {}
    if _is_image_batch(args):
        available["channels_last"] = None
    if device.type == "cuda":
        available["fp16"] = torch.float16
        if torch.cuda.is_bf16_supported():
            available["bf16"] = torch.bfloat16
        else:
            unavailable["bf16"] = "this GPU has no native bf16; use precision='fp16'"
        unavailable["int8"] = "int8 (PT2E, x86 kernels) runs on the CPU: move the model to the CPU, or use 'fp16'"
        return available, unavailable
    if device.type != "cpu":
        raise InvalidArgumentError(f"optimize runs models on the CPU or a CUDA GPU, not on {device}")
    unavailable["fp16"] = "fp16 runs on a CUDA GPU; on the CPU use precision='fp32' or 'auto'"
    if cpu_features().bf16:
        available["bf16"] = torch.bfloat16
    else:
        unavailable["bf16"] = (
            f"this CPU ({cpu_features().capability}, no AVX-512 BF16 or AMX) does not "
            "run bf16 natively, so it would be slower than fp32; use precision='fp32' or 'auto'"
        )
    if not _is_cnn(model) or not _is_image_batch(args):
        families = ", ".join(dict.fromkeys(spec.module for spec in ARCHS.values() if spec.int8))
        unavailable["int8"] = (
            f"int8 quantization applies to the CNN image families ({families}) "
            f"on 4-D image batches, not {_architecture(model)}; use precision='fp32'"
        )
    elif not has_torchao():
        unavailable["int8"] = "int8 needs torchao, which is not installed: pip install zoo[int8]"
    else:
        available["int8"] = None
    return available, unavailable


def _build(
    name: str, model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]], option: Any
) -> OptimizedModel:
    """Candidate ``name`` ready to run (a compiled one compiles on its first call); ``option`` is
    what `_candidates` gave it: an autocast dtype or None, or a runtime's shared `Conversion`.
    The caller's model is left as it is: channels_last variants run on a copy."""
    if name in runtime_candidates.RUNTIMES:
        return runtime_candidates.build_runtime(name, model, args, batches, option)
    autocast = option
    image = _is_image_batch(args)
    example_batch = len(args[0]) if image and _is_cnn(model) else None
    if name == "int8":
        optimized = OptimizedModel(
            model, quantize_int8(model, args, batches), compiled=True, example_batch=example_batch
        )
    elif name == "channels_last":
        return OptimizedModel(model, copy.deepcopy(model).to(memory_format=torch.channels_last), channels_last=True)
    else:
        body = copy.deepcopy(model).to(memory_format=torch.channels_last) if image else model
        compiled = torch.compile(
            body, backend="inductor", dynamic=False
        )  # one graph per input shape: the fastest kernels
        optimized = OptimizedModel(
            model, compiled, channels_last=image, autocast=autocast, compiled=True, example_batch=example_batch
        )
    optimized.max_batch_graphs = 1  # checking on calibration batches of other sizes compiles nothing more
    return optimized


def _compare(
    classifier: bool, references: list[Any], batches: list[tuple[Any, ...]], candidate: Callable[..., Any]
) -> tuple[float | None, float]:
    """Top-1 agreement with the references (classifier outputs; None otherwise) and the
    largest absolute output difference, over ``batches``."""
    agree = total = 0
    worst = 0.0
    with torch.no_grad():
        for batch, reference in zip(batches, references):
            output = candidate(*batch)
            for e, a in zip(output_tensors(reference), output_tensors(output), strict=True):
                if e.shape != a.shape:
                    raise InvalidArgumentError(
                        f"output shape {tuple(a.shape)} differs from fp32 eager's {tuple(e.shape)}"
                    )
                worst = max(worst, (e.float() - a.float()).abs().max().item() if e.numel() else 0.0)
            if classifier:
                agree += int((reference.argmax(-1) == output.argmax(-1)).sum())
                total += reference[..., 0].numel()
    return (agree / total if classifier else None), worst


def _passes(name: str, candidate: Candidate, references: list[Any], min_agreement: float) -> tuple[bool, str]:
    if candidate.top1_agreement is not None:
        ok = candidate.top1_agreement >= min_agreement
        return (
            ok,
            "" if ok else f"top-1 agreement {candidate.top1_agreement:.2%} with fp32 is below {min_agreement:.2%}",
        )
    scale = max(t.float().abs().max().item() for r in references for t in output_tensors(r)) or 1.0
    relative = candidate.max_abs_diff / scale
    ok = relative <= RELATIVE_TOLERANCE[name]
    return ok, "" if ok else f"outputs differ from fp32 by {relative:.2g} (relative), over {RELATIVE_TOLERANCE[name]:g}"


def _is_classifier(model: nn.Module, output: Any) -> bool:
    """Whether ``output`` is class scores: one tensor whose last dimension is the model's classes."""
    num_classes = getattr(model, "num_classes", None)
    return (
        isinstance(output, torch.Tensor) and output.ndim >= 2 and bool(num_classes) and output.shape[-1] == num_classes
    )


def medians(
    runs: list[Callable[..., Any]],
    args: tuple[Any, ...],
    repeats: int,
    device: torch.device = torch.device("cpu"),
    warmup: int = _WARMUP_CALLS,
) -> list[float]:
    """Median wall time of each ``run(*args)`` over ``repeats`` calls after ``warmup`` calls (a
    compiled run compiles there), the runs called in turn, so that a change in the machine's
    load meanwhile hits them alike."""
    times: list[list[float]] = [[] for _ in runs]
    with torch.no_grad():
        for call in range(warmup + repeats):
            for run, measured in zip(runs, times):
                start = time.perf_counter()
                run(*args)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if call >= warmup:
                    measured.append(time.perf_counter() - start)
    return [statistics.median(measured) for measured in times]


def _example_args(example_input: Any) -> tuple[Any, ...]:
    if example_input is None:
        raise InvalidArgumentError(
            "optimize needs example_input: a batch like the ones you will run (e.g. torch.randn(16, 3, 224, 224)), "
            "or a tuple of the model's positional arguments; candidates are compiled and timed on its shape"
        )
    return example_input if isinstance(example_input, tuple) else (example_input,)


def _check_batches(calibration: Iterable[Any] | torch.Tensor | None, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The calibration as a list of argument tuples shaped like ``args`` (a tensor is split
    into batches of the example's size); an error names a batch that does not fit."""
    if calibration is None:
        return [args]
    if isinstance(calibration, torch.Tensor):
        size = len(args[0]) if isinstance(args[0], torch.Tensor) and args[0].ndim else 1
        calibration = calibration.split(size) if calibration.ndim else [calibration]
    batches = [b if isinstance(b, tuple) else (b,) for b in calibration]
    if not batches:
        raise InvalidArgumentError("calibration is empty: pass batches of inputs (or one tensor), or calibration=None")
    for index, batch in enumerate(batches):
        expected = [(tuple(a.shape[1:]), a.dtype) if isinstance(a, torch.Tensor) else type(a) for a in args]
        given = [(tuple(b.shape[1:]), b.dtype) if isinstance(b, torch.Tensor) else type(b) for b in batch]
        if given != expected:
            raise InvalidArgumentError(
                f"calibration batch {index} has {_describe(batch)}, example_input has {_describe(args)}: "
                "calibration batches must match example_input in everything but the batch size"
            )
    return batches


def _describe(args: tuple[Any, ...]) -> str:
    return ", ".join(
        f"shape {tuple(a.shape)} {a.dtype}" if isinstance(a, torch.Tensor) else type(a).__name__ for a in args
    )


def _cache_key(
    model: nn.Module, args: tuple[Any, ...], device: torch.device, report: OptimizeReport, available: dict[str, Any]
) -> str:
    """What auto's choice depends on: machine, model, input, torch, and the candidates there were
    (a runtime installed later, or ``runtimes=False``, is another choice, made anew)."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    model_id = cfg.get("weights") or _architecture(model)
    kwargs = json.dumps(cfg.get("model_kwargs", {}), sort_keys=True, default=str)
    params = sum(p.numel() for p in model.parameters())
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return (
        f"{device_name}|{report.cpu_capability}|amx={report.amx}|{model_id}|{kwargs}|{params} params|"
        f"{_describe(args)}|torch {torch.__version__}|candidates {','.join(sorted(available))}"
        + (f"|{runtime_candidates.versions()}" if set(available) & set(runtime_candidates.RUNTIMES) else "")
    )


def _architecture(model: nn.Module) -> str:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return cfg.get("architecture") or type(model).__name__


def _is_cnn(model: nn.Module) -> bool:
    """Whether the model's architecture is a CNN family (its spec's ``int8``: static int8
    quantizes it, and its samples are computed alone, so compiled graphs can be padded)."""
    spec = weight_entries.find_spec(_architecture(model))
    return spec is not None and spec.int8


def _is_image_batch(args: tuple[Any, ...]) -> bool:
    return len(args) == 1 and isinstance(args[0], torch.Tensor) and args[0].ndim == 4 and args[0].is_floating_point()
