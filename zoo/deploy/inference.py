"""`optimize`: the fastest inference path for a model, measured on this machine.

Candidates are fp32 eager (the reference, always kept, so "auto" is never slower), fp32 eager
in channels_last (4-D inputs), fp32 through ``torch.compile`` (inductor with freezing), bf16
autocast + compile where the hardware runs bf16 natively (fp16 too on a GPU), and static int8
post-training quantization through PT2E (torchao's x86 quantizer, then inductor with freezing)
for the convolutional image families. Each is checked against fp32 eager on the calibration
batches (top-1 agreement for classifiers, a relative tolerance otherwise) and timed on the
example input's shape in turn with fp32 eager; "auto" keeps the one with the largest speed-up
that passes and remembers the choice per machine, model and input shape in
``$ZOO_HOME/optimize.json``.

A compiled graph serves one batch size (in torch 2.14, inductor's frozen convolutions fail
when recompiled for a dynamic batch), and compiling one takes seconds to a minute. So a
compiled CNN compiles a graph for each of its first ``max_batch_graphs`` batch sizes, the
example's first; any other size runs on those graphs, split into chunks and padded, which its
outputs do not depend on (every sample of a CNN in eval mode is computed alone).

BatchNorm is folded into the preceding convolution by the graph passes, not by walking the
module tree: inductor's freezing folds conv-bn on the traced data flow, and PT2E's
``prepare_pt2e`` folds it before quantizing. The module tree does not say which layer feeds
which (DenseNet's BatchNorm comes before its convolution), the traced graph does.
"""
from __future__ import annotations

import copy
import json
import logging
import pydoc
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from zoo.store import download
from zoo.deploy.exporter import output_tensors
from zoo.devices import model_device
from zoo.errors import InvalidArgumentError
from zoo.store.files import write_json

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
CACHE_FILE = "optimize.json"
CNN_FAMILIES = ("resnet", "seresnet", "resnext", "wide_resnet", "densenet", "sedensenet", "mobilenet")
MAX_BATCH_GRAPHS = 4  # batch sizes a compiled CNN compiles a graph for; other sizes run on those
# dynamo's recompile limit (8) counts the graphs of every model of one class (they share
# ``forward``'s code): with this one, zoo's bounded graphs never push a model back to eager
_RECOMPILE_LIMIT = 256
# Largest relative output difference (max |diff| / max |fp32|) that passes for outputs that are not class scores.
RELATIVE_TOLERANCE = {"eager": 0.0, "channels_last": 1e-4, "fp32": 1e-3, "bf16": 5e-2, "fp16": 1e-2, "int8": 1e-1}
_WARMUP_CALLS = 2  # the first call of a compiled candidate compiles it


@dataclass
class Candidate:
    """One way of running the model, as measured: median seconds per call on the example
    input, speed-up over fp32 eager (timed in turn with it), and how its outputs compare
    with fp32 eager's."""

    name: str
    median_s: float | None = None
    speedup: float | None = None
    top1_agreement: float | None = None  # classifiers only
    max_abs_diff: float | None = None
    passed: bool = False
    note: str = ""  # why it was skipped or failed


@dataclass
class OptimizeReport:
    """What `optimize` measured and chose; ``cached`` means the choice came from an earlier
    call on this machine (its figures are that call's)."""

    precision: str
    speedup: float
    candidates: list[Candidate]
    cpu_capability: str
    amx: bool
    device: str
    cached: bool = False
    cache_key: str = field(default="", repr=False)

    def __str__(self) -> str:
        lines = [f"chose {self.precision} ({self.speedup:.2f}x fp32 eager) on {self.device}, "
                 f"CPU {self.cpu_capability}, AMX {'yes' if self.amx else 'no'}{' (cached)' if self.cached else ''}"]
        for c in self.candidates:
            ms = f"{c.median_s * 1e3:.2f} ms" if c.median_s is not None else "-"
            agreement = f"top-1 {c.top1_agreement:.2%}" if c.top1_agreement is not None else ""
            diff = f"max diff {c.max_abs_diff:.2g}" if c.max_abs_diff is not None else ""
            status = "ok" if c.passed else f"not used: {c.note}"
            lines.append(f"  {c.name:<14}{ms:>12}  {agreement:<15}{diff:<17}{status}")
        return "\n".join(lines)


class OptimizedModel(nn.Module):
    """The model's call, run the fastest measured way, for inference only (no gradients).
    Attributes other than the call (``pretrained_cfg``, ``num_classes``, ...) are the
    original model's, read through ``.model``. ``max_batch_graphs`` bounds the batch sizes a
    compiled CNN compiles a graph for (see the module docstring); ``graph_batch_sizes`` are
    those it has."""

    optimize_report: OptimizeReport

    def __init__(self, model: nn.Module, run: Callable[..., Any], channels_last: bool = False,
                 autocast: torch.dtype | None = None, compiled: bool = False,
                 example_batch: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.__dict__["_run"] = run  # outside the module tree: a compiled copy is no part of the state dict
        self._channels_last = channels_last
        self._compiled = compiled  # eager runs skip the inductor config patch, which costs ~0.1 ms a call
        self._autocast = autocast
        self.graph_batch_sizes: list[int] | None = None if example_batch is None else [example_batch]
        self.max_batch_graphs = MAX_BATCH_GRAPHS
        super().train(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._channels_last:
            args = tuple(_channels_last(a) for a in args)
        with ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            if self._compiled:
                stack.enter_context(_compile_settings(bounded=self.graph_batch_sizes is not None))
            if self._autocast is not None:
                stack.enter_context(torch.autocast(model_device(self.model).type, dtype=self._autocast))
                return _to_dtype(self._call(args, kwargs), torch.float32)
            return self._call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sizes = self.graph_batch_sizes
        batch = _batch_size(args)
        if sizes is None or kwargs or batch is None or batch in sizes:
            return self._run(*args, **kwargs)
        if batch == 0:  # nothing to pad from, nothing worth a graph
            return self.model(*args)
        if len(sizes) < self.max_batch_graphs:
            sizes.append(batch)
            return self._run(*args)
        return self._run_on_graphs(args, batch)

    def _run_on_graphs(self, args: tuple[Any, ...], batch: int) -> torch.Tensor:
        """``args``, a batch of ``batch`` samples, through the graphs compiled already: in
        chunks of the largest graph's size, the last one padded (its first sample repeated)
        to the smallest graph that holds it."""
        sizes = self.graph_batch_sizes
        largest = max(sizes)
        outputs = []
        for start in range(0, batch, largest):
            rows = min(largest, batch - start)
            size = min(s for s in sizes if s >= rows)
            chunk = tuple(_padded(a[start:start + rows], size) for a in args)
            if self._channels_last:  # the graphs were compiled for channels_last strides
                chunk = tuple(_channels_last(a) for a in chunk)
            outputs.append(self._run(*chunk)[:rows])
        return torch.cat(outputs)

    def train(self, mode: bool = True) -> OptimizedModel:
        if mode:
            raise InvalidArgumentError(
                "an optimized model runs inference only (compiled with frozen weights); "
                "fine-tune the original model (optimized.model) and optimize it again"
            )
        return super().train(False)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("model"), name)


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
    The result carries ``optimize_report`` (`OptimizeReport`)."""
    if precision not in PRECISIONS:
        raise InvalidArgumentError(f"precision={precision!r} is not one of {', '.join(map(repr, PRECISIONS))}")
    if not 0.0 < min_agreement <= 1.0:
        raise InvalidArgumentError(f"min_agreement is a fraction in (0, 1], got {min_agreement!r}")
    if repeats < 1:
        raise InvalidArgumentError(f"repeats must be 1 or more, got {repeats!r}")
    if isinstance(max_batch_graphs, bool) or not (isinstance(max_batch_graphs, int) and max_batch_graphs >= 1):
        raise InvalidArgumentError(f"max_batch_graphs must be an int of 1 or more, got {max_batch_graphs!r}")
    model.eval()
    args = _example_args(example_input)
    device = model_device(model)
    batches = _check_batches(calibration, args)
    available, unavailable = _candidates(model, args, device)
    if precision != "auto" and precision not in available:
        raise InvalidArgumentError(f"precision={precision!r} does not apply here: {unavailable[precision]}")
    with torch.no_grad():
        references = [model(*batch) for batch in batches]
    report = OptimizeReport("eager", 1.0, [], torch.backends.cpu.get_cpu_capability(), has_amx(), str(device))
    report.cache_key = _cache_key(model, args, device, report)
    (baseline_s,) = medians([model], args, repeats, device)
    classifier = _is_classifier(model, references[0])
    eager = Candidate("eager", baseline_s, 1.0, 1.0 if classifier else None, 0.0, passed=True)
    built: dict[str, nn.Module] = {"eager": OptimizedModel(model, model)}

    def measure(names: Iterable[str]) -> list[Candidate]:
        results = [eager]
        for name in names:
            candidate = Candidate(name)
            try:
                built[name] = _build(name, model, args, batches, available[name])
                candidate.top1_agreement, candidate.max_abs_diff = _compare(classifier, references, batches, built[name])
                eager_s, candidate.median_s = medians([model, built[name]], args, repeats, device)
                candidate.speedup = eager_s / candidate.median_s  # against eager timed alongside it
                candidate.passed, candidate.note = _passes(name, candidate, references, min_agreement)
            except Exception as error:  # noqa: BLE001 - auto records a candidate that fails and goes on
                if precision != "auto":
                    raise
                candidate.note = f"failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
            results.append(candidate)
        return results

    if precision != "auto":
        chosen = measure([precision])[-1]
        report.candidates = [eager, chosen] + [Candidate(n, note=reason) for n, reason in unavailable.items()]
        if not chosen.passed:
            warnings.warn(f"optimize(precision={precision!r}): {chosen.note}; compare with precision='auto'",
                          stacklevel=2)
    else:
        remembered = _remembered(report.cache_key) if cache else None
        if remembered is not None and remembered[0] in available:
            chosen = measure([remembered[0]] if remembered[0] != "eager" else [])[-1]
            if chosen.passed:
                report.candidates, report.cached = remembered[1], True
        if not report.cached:
            report.candidates = measure(n for n in available if n != "eager")
            report.candidates += [Candidate(n, note=reason) for n, reason in unavailable.items()]
            chosen = max((c for c in report.candidates if c.passed), key=lambda c: c.speedup)
            if cache:
                _write_cache(report.cache_key, chosen.name, report.candidates)
    report.precision, report.speedup = chosen.name, chosen.speedup or 1.0
    result = built[chosen.name]
    result.max_batch_graphs = max_batch_graphs
    result.optimize_report = report
    return result


def unavailable_precisions(model: nn.Module, example_input: Any) -> dict[str, str]:
    """Why each precision that does not apply to ``model`` on ``example_input`` here does not."""
    return _candidates(model, _example_args(example_input), model_device(model))[1]


def has_amx() -> bool:
    """Whether the CPU has AMX tiles (``amx_tile`` in /proc/cpuinfo; False where that file is missing)."""
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


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
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        available["bf16"] = torch.bfloat16
    else:
        unavailable["bf16"] = (f"this CPU ({torch.backends.cpu.get_cpu_capability()}, no AVX-512 BF16 or AMX) does not "
                               "run bf16 natively, so it would be slower than fp32; use precision='fp32' or 'auto'")
    arch = _architecture(model)
    if not arch.startswith(CNN_FAMILIES) or not _is_image_batch(args):
        unavailable["int8"] = (f"int8 quantization applies to the CNN image families ({', '.join(CNN_FAMILIES)}) "
                               f"on 4-D image batches, not {arch}; use precision='fp32'")
    elif not _has_torchao():
        unavailable["int8"] = "int8 needs torchao, which is not installed: pip install zoo[int8]"
    else:
        available["int8"] = None
    return available, unavailable


def _build(name: str, model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]],
           autocast: torch.dtype | None) -> OptimizedModel:
    """Candidate ``name`` ready to run (a compiled one compiles on its first call). The caller's
    model is left as it is: channels_last variants run on a copy."""
    image = _is_image_batch(args)
    example_batch = len(args[0]) if image and _architecture(model).startswith(CNN_FAMILIES) else None
    if name == "int8":
        optimized = OptimizedModel(model, _quantize_int8(model, args, batches), compiled=True,
                                   example_batch=example_batch)
    elif name == "channels_last":
        return OptimizedModel(model, copy.deepcopy(model).to(memory_format=torch.channels_last), channels_last=True)
    else:
        body = copy.deepcopy(model).to(memory_format=torch.channels_last) if image else model
        compiled = torch.compile(body, backend="inductor", dynamic=False)  # one graph per input shape: the fastest kernels
        optimized = OptimizedModel(model, compiled, channels_last=image, autocast=autocast, compiled=True,
                                   example_batch=example_batch)
    optimized.max_batch_graphs = 1  # checking on calibration batches of other sizes compiles nothing more
    return optimized


def _quantize_int8(model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]]) -> Callable[..., Any]:
    """Static int8 post-training quantization: capture with ``torch.export`` (dynamic batch, so
    calibration batches and later calls may have any size), calibrate observers on
    ``batches``, convert, compile with inductor (freezing on)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    # a batch of one would be specialised (export fixes sizes 0 and 1): capture on two rows
    args = tuple(torch.cat([a, a]) if isinstance(a, torch.Tensor) and len(a) == 1 else a for a in args)
    dynamic = tuple({0: torch.export.Dim.AUTO} if isinstance(a, torch.Tensor) else None for a in args)
    with torch.no_grad():
        captured = torch.export.export(model, args, dynamic_shapes=dynamic).module()
    _mark_module_calls(captured)
    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(captured, quantizer)
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    # one graph per batch size: with freezing on, inductor's int8 convolutions recompiled for a
    # dynamic batch broke on their layout ("expected stride 1==784") in torch 2.14
    return torch.compile(convert_pt2e(prepared), backend="inductor", dynamic=False)


def _mark_module_calls(graph_module: torch.fx.GraphModule) -> None:
    """Give every node traced from a ``torch.nn`` layer a source entry of its own call.

    The x86 quantizer finds conv / add / ReLU patterns by the layer each node came from;
    ``torch.export`` records that layer by name only, so a ReLU module called twice in one
    block (torchvision's and zoo's ResNets) reads as one layer with two outputs and the
    quantizer refuses it. The per-call key of ``nn_module_stack`` tells the calls apart."""
    for node in graph_module.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op != "call_function" or not stack or node.meta.get("source_fn_stack"):
            continue
        call_key, (_, layer) = list(stack.items())[-1]
        if isinstance(layer, str):
            layer = pydoc.locate(layer) if layer.startswith("torch.nn.") else None
        if isinstance(layer, type):
            node.meta["source_fn_stack"] = [(call_key, layer)]


def _compare(classifier: bool, references: list[Any], batches: list[tuple[Any, ...]],
             candidate: Callable[..., Any]) -> tuple[float | None, float]:
    """Top-1 agreement with the references (classifier outputs; None otherwise) and the
    largest absolute output difference, over ``batches``."""
    agree = total = 0
    worst = 0.0
    with torch.no_grad():
        for batch, reference in zip(batches, references):
            output = candidate(*batch)
            for e, a in zip(output_tensors(reference), output_tensors(output), strict=True):
                if e.shape != a.shape:
                    raise ValueError(f"output shape {tuple(a.shape)} differs from fp32 eager's {tuple(e.shape)}")
                worst = max(worst, (e.float() - a.float()).abs().max().item() if e.numel() else 0.0)
            if classifier:
                agree += int((reference.argmax(-1) == output.argmax(-1)).sum())
                total += reference[..., 0].numel()
    return (agree / total if classifier else None), worst


def _passes(name: str, candidate: Candidate, references: list[Any], min_agreement: float) -> tuple[bool, str]:
    if candidate.top1_agreement is not None:
        ok = candidate.top1_agreement >= min_agreement
        return ok, "" if ok else f"top-1 agreement {candidate.top1_agreement:.2%} with fp32 is below {min_agreement:.2%}"
    scale = max(t.float().abs().max().item() for r in references for t in output_tensors(r)) or 1.0
    relative = candidate.max_abs_diff / scale
    ok = relative <= RELATIVE_TOLERANCE[name]
    return ok, "" if ok else f"outputs differ from fp32 by {relative:.2g} (relative), over {RELATIVE_TOLERANCE[name]:g}"


def _is_classifier(model: nn.Module, output: Any) -> bool:
    """Whether ``output`` is class scores: one tensor whose last dimension is the model's classes."""
    num_classes = getattr(model, "num_classes", None)
    return isinstance(output, torch.Tensor) and output.ndim >= 2 and bool(num_classes) and output.shape[-1] == num_classes


def medians(runs: list[Callable[..., Any]], args: tuple[Any, ...], repeats: int,
            device: torch.device = torch.device("cpu")) -> list[float]:
    """Median wall time of each ``run(*args)`` over ``repeats`` calls after a warm-up (a
    compiled run compiles there), the runs called in turn, so that a change in the machine's
    load meanwhile hits them alike."""
    times: list[list[float]] = [[] for _ in runs]
    with torch.no_grad():
        for call in range(_WARMUP_CALLS + repeats):
            for run, measured in zip(runs, times):
                start = time.perf_counter()
                run(*args)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if call >= _WARMUP_CALLS:
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
    return ", ".join(f"shape {tuple(a.shape)} {a.dtype}" if isinstance(a, torch.Tensor) else type(a).__name__
                     for a in args)


def _cache_key(model: nn.Module, args: tuple[Any, ...], device: torch.device, report: OptimizeReport) -> str:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    model_id = cfg.get("weights") or _architecture(model)
    kwargs = json.dumps(cfg.get("model_kwargs", {}), sort_keys=True, default=str)
    params = sum(p.numel() for p in model.parameters())
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return (f"{device_name}|{report.cpu_capability}|amx={report.amx}|{model_id}|{kwargs}|{params} params|"
            f"{_describe(args)}|torch {torch.__version__}")


def _read_cache() -> dict[str, Any]:
    """The remembered choices; an unreadable or damaged file counts as none."""
    try:
        data = json.loads((download.zoo_home() / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remembered(key: str) -> tuple[str, list[Candidate]] | None:
    """The precision auto chose before under ``key`` and the candidates it measured then, or
    None (nothing remembered, or an entry this version cannot read)."""
    entry = _read_cache().get(key)
    try:
        return entry["precision"], [Candidate(**c) for c in entry["candidates"]]
    except (TypeError, KeyError):
        return None


def _write_cache(key: str, precision: str, candidates: list[Candidate]) -> None:
    """Remember auto's choice; a read-only ``$ZOO_HOME`` just keeps nothing."""
    data = _read_cache()
    data[key] = {"precision": precision, "candidates": [asdict(c) for c in candidates]}
    try:
        write_json(data, download.zoo_home() / CACHE_FILE)
    except OSError:
        pass


def _architecture(model: nn.Module) -> str:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return cfg.get("architecture") or type(model).__name__


def _has_torchao() -> bool:
    """Whether torchao imports; its import logs a torch deprecation line (Enum constants for
    torch.compile) that says nothing to a zoo user, so that logger is quiet meanwhile."""
    with _quiet_logger("torch.utils._pytree"):
        try:
            import torchao.quantization.pt2e  # noqa: F401
        except ImportError:
            return False
    return True


def _is_image_batch(args: tuple[Any, ...]) -> bool:
    return len(args) == 1 and isinstance(args[0], torch.Tensor) and args[0].ndim == 4 and args[0].is_floating_point()


def _channels_last(arg: Any) -> Any:
    return arg.contiguous(memory_format=torch.channels_last) if isinstance(arg, torch.Tensor) and arg.ndim == 4 else arg


def _compile_settings(bounded: bool) -> ExitStack:
    """Inductor's freezing (weights as constants: conv-bn folding, prepacked int8 weights) for
    the calls inside, and, for a model whose graphs zoo bounds (``bounded``), dynamo's
    recompile limit raised: inductor compiles lazily, on the first call of each shape, so the
    settings are scoped to the calls rather than to ``torch.compile``, and ``options=`` does
    not reach the int8 passes."""
    import torch._dynamo.config
    import torch._inductor.config

    stack = ExitStack()
    stack.enter_context(torch._inductor.config.patch(freezing=True))
    if bounded:
        stack.enter_context(torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT))
    # what compiling says that is torch's own business, not the user's: a CPU-only
    # machine's CUDA_HOME notice, and a tensor-copy warning inside inductor's int8 lowering
    stack.enter_context(_quiet_logger("torch.utils.cpp_extension"))
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", message="To copy construct from a tensor", module=r"torch\._inductor")
    return stack


@contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` inside."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _batch_size(args: tuple[Any, ...]) -> int | None:
    """The batch size of a call whose arguments are all tensors with one dim-0 size, else None."""
    sizes = {a.shape[0] if isinstance(a, torch.Tensor) and a.ndim else None for a in args}
    return sizes.pop() if len(sizes) == 1 else None


def _padded(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """``tensor`` with its first row repeated at the end up to ``rows`` rows."""
    if len(tensor) == rows:
        return tensor
    return torch.cat([tensor, tensor[:1].expand(rows - len(tensor), *tensor.shape[1:])])


def _to_dtype(output: Any, dtype: torch.dtype) -> Any:
    """``output`` with its floating-point tensors in ``dtype`` (autocast's bf16 back to fp32)."""
    if isinstance(output, torch.Tensor):
        return output.to(dtype) if output.is_floating_point() else output
    if isinstance(output, Mapping):
        return type(output)({k: _to_dtype(v, dtype) for k, v in output.items()})
    if isinstance(output, (tuple, list)):
        return type(output)(_to_dtype(v, dtype) for v in output)
    return output
