"""After training: export to TorchScript, ``torch.export`` and ONNX (`zoo.deploy.exporter`'s exporters,
each re-loaded and checked against eager), int8 quantization (static, through `zoo.optimize`,
for the CNN families; dynamic, of the Linear layers, for models made mostly of them) and
global magnitude pruning, each with its size, speed or sparsity and the accuracy it keeps;
`post_training` runs them all.

``torch.ao.quantization`` is deprecated in torch 2.14 in favour of torchao (not a zoo
dependency) but is still shipped and working in the pinned torch 2.14.1, and its fbgemm/x86
int8 kernels are the fast CPU path (a hand-written int8 Linear on ``torch._int_mm`` was far
slower than fp32 on CPU).
"""

from __future__ import annotations

import copy
import io
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.utils.prune as prune

from zoo.deploy import inference
from zoo.deploy.exporter import (
    NOT_TENSORS_REASON,
    ExampleInput,
    ExportResult,
    export_onnx,
    export_program,
    export_torchscript,
    onnx_packages,
)
from zoo.devices import model_device
from zoo.errors import InvalidArgumentError, ZooError
from zoo.store.files import write_json
from zoo.training.finetune.report import (
    ClassificationReport,
    Forward,
    classifier_forward,
    evaluate_classifier,
    plot_confusion_matrix,
)
from zoo.training.loop.steps import move_to_device

TORCHSCRIPT_FILE = "model.torchscript.pt"
EXPORTED_PROGRAM_FILE = "model.pt2"
ONNX_FILE = "model.onnx"
REPORT_FILE = "eval_report.json"
CONFUSION_FILE = "confusion_matrix.png"
SUMMARY_FILE = "post_training.json"


def state_dict_bytes(model: nn.Module) -> int:
    """Size of the model's state dict as ``torch.save`` writes it (works for quantized models,
    whose packed int8 weights are not ordinary parameters)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def linear_fraction(model: nn.Module) -> float:
    """Share of the model's parameters that sit in ``nn.Linear`` layers (what dynamic int8
    quantization can shrink)."""
    total = sum(p.numel() for p in model.parameters())
    linear = sum(p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters(recurse=False))
    return linear / total if total else 0.0


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A CPU copy of ``model`` whose ``nn.Linear`` layers hold int8 weights and quantize their
    activations per batch at run time (``torch.ao.quantization.quantize_dynamic``; runs on
    CPU only). The original model is left unchanged."""
    from torch.ao.quantization import quantize_dynamic

    source = copy.deepcopy(model).cpu().eval()
    with warnings.catch_warnings():
        # deprecated in favour of torchao, still shipped in torch 2.14 (see the module docstring)
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor", category=UserWarning)
        return quantize_dynamic(source, {nn.Linear}, dtype=torch.qint8)


def _prunable(model: nn.Module) -> list[tuple[nn.Module, str]]:
    layers = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
    return [(m, "weight") for m in model.modules() if isinstance(m, layers) and m.weight is not None]


def weight_sparsity(model: nn.Module) -> float:
    """Fraction of zeros among the conv and linear weights."""
    weights = [getattr(m, name) for m, name in _prunable(model)]
    total = sum(w.numel() for w in weights)
    return sum(int((w == 0).sum()) for w in weights) / total if total else 0.0


def global_magnitude_prune(model: nn.Module, amount: float) -> float:
    """Zero the ``amount`` fraction of conv and linear weights with the smallest magnitude,
    ranked across all layers together (``prune.global_unstructured`` with L1), in place and
    made permanent (``prune.remove``: plain weights, no masks left). Returns the sparsity."""
    if not 0.0 <= amount < 1.0:
        raise InvalidArgumentError(f"amount is the fraction of weights to zero, in [0, 1); got {amount!r}")
    params = _prunable(model)
    if not params:
        raise InvalidArgumentError(f"{type(model).__name__} has no Conv or Linear weights to prune")
    prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=amount)
    for module, name in params:
        prune.remove(module, name)
    return weight_sparsity(model)


def _metrics(report: ClassificationReport, reference: ClassificationReport) -> dict[str, float]:
    return {"accuracy": report.accuracy, "macro_f1": report.macro_f1, "agreement": report.agreement(reference)}


def _attempt(summary: dict[str, Any], key: str, step: Callable[[], Any]) -> None:
    """Record ``step()``'s result under ``key``; a failure (say a model torch.export cannot
    trace) is recorded and warned about instead of losing the rest of the post-training run."""
    try:
        summary[key] = step()
    except Exception as error:  # noqa: BLE001 - every failure is reported, none is hidden
        summary[key] = {"error": f"{type(error).__name__}: {error}"}
        warnings.warn(f"post-training step {key!r} failed: {type(error).__name__}: {error}", stacklevel=3)


def post_training(
    model: nn.Module,
    val_loader: Any,
    out_dir: str | os.PathLike,
    example_input: ExampleInput,
    *,
    device: torch.device | str | None = None,
    class_names: Sequence[str] | None = None,
    forward: Forward = classifier_forward,
    dynamic_batch: bool = True,
    quantize: bool | None = None,
    calibration: Sequence[ExampleInput] | None = None,
    prune_amounts: Sequence[float] = (0.25, 0.5, 0.75),
    progress: bool = True,
) -> dict[str, Any]:
    """Everything the issue's "after training" asks for, written to ``out_dir``: the evaluation
    report (``eval_report.json``, ``confusion_matrix.png``); TorchScript, ``torch.export`` and
    (with the ``zoo[onnx]`` extra) ONNX files, each checked against eager; int8 quantization
    with its accuracy: static (`zoo.optimize`'s PT2E path, calibrated on ``calibration``, input
    batches that default to ``[example_input]``) for the CNN families, with its speed-up over
    fp32 on this CPU, else dynamic for models with at least half their parameters in Linear
    layers, with its size (``quantize=False`` skips it, ``True`` asks for dynamic int8 where
    neither applies); and pruning at each of ``prune_amounts`` with the accuracy after it (no
    fine-tuning in between). ``device``, ``class_names`` and ``forward`` go to
    `evaluate_classifier`, ``dynamic_batch`` to the exporters. Returns the summary also
    written to ``post_training.json``; the model itself is not modified."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(device) if device is not None else model_device(model)
    start = time.perf_counter()
    evaluation = _Evaluation(model, val_loader, device, class_names, forward, progress)
    baseline = evaluation.baseline
    write_json(baseline.to_dict(), out_dir / REPORT_FILE)
    plot_confusion_matrix(baseline, out_dir / CONFUSION_FILE)
    summary: dict[str, Any] = {
        "evaluation": {
            "accuracy": baseline.accuracy,
            "macro_f1": baseline.macro_f1,
            "num_samples": baseline.num_samples,
            "seconds": time.perf_counter() - start,
        },
    }
    _export_all(summary, model, example_input, out_dir, dynamic_batch)
    _quantization(summary, evaluation, example_input, quantize, calibration)
    _attempt(summary, "pruning", lambda: _pruning(evaluation, prune_amounts))
    write_json(summary, out_dir / SUMMARY_FILE)
    return summary


@dataclass
class _Evaluation:
    """The validation runs of `post_training`: ``model`` (as given) is the ``baseline`` that
    quantized and pruned copies are compared with, all on the same loader."""

    model: nn.Module
    loader: Any
    device: torch.device
    class_names: Sequence[str] | None
    forward: Forward
    progress: bool
    baseline: ClassificationReport = field(init=False)

    def __post_init__(self) -> None:
        self.baseline = self(self.model)

    def __call__(self, model: nn.Module, on: torch.device | None = None) -> ClassificationReport:
        """The report of ``model`` on the loader, run on ``on`` (default: the device asked for)."""
        return evaluate_classifier(
            model,
            self.loader,
            device=on if on is not None else self.device,
            class_names=self.class_names,
            forward=self.forward,
            progress=self.progress,
        )

    def cpu_baseline(self) -> ClassificationReport:
        """The baseline run on CPU, where the int8 models run: their reference."""
        cpu = torch.device("cpu")
        return self.baseline if self.device == cpu else self(copy.deepcopy(self.model).cpu(), cpu)


def _quantization(
    summary: dict[str, Any],
    evaluation: _Evaluation,
    example_input: ExampleInput,
    quantize: bool | None,
    calibration: Sequence[ExampleInput] | None,
) -> None:
    """int8 quantization of ``evaluation.model``, recorded in ``summary``: static where
    `zoo.optimize` supports it, else dynamic for Linear-heavy models, else why it was skipped."""
    model, cpu = evaluation.model, torch.device("cpu")
    fraction = linear_fraction(model)
    cpu_model = copy.deepcopy(model).cpu().eval()
    static_int8 = inference.unavailable_precisions(cpu_model, move_to_device(example_input, cpu)).get("int8")
    if quantize is not False and static_int8 is None:
        batches = calibration or [example_input]
        _attempt(summary, "quantization", lambda: _static_int8(cpu_model, batches, fraction, evaluation))
    elif quantize or (quantize is None and fraction >= 0.5):
        _attempt(summary, "quantization", lambda: _dynamic_int8(fraction, evaluation))
    else:
        reason = (
            "quantize=False"
            if quantize is False
            else f"static int8 does not apply ({static_int8}), and under half of the parameters are in Linear layers"
        )
        summary["quantization"] = {"linear_fraction": fraction, "skipped": reason}


def _static_int8(
    cpu_model: nn.Module, calibration: Sequence[ExampleInput], fraction: float, evaluation: _Evaluation
) -> dict[str, Any]:
    """Static int8 through `zoo.optimize` (PT2E, x86 inductor), calibrated on ``calibration``:
    its accuracy against fp32 and its measured speed-up over fp32 eager on this CPU."""
    began = time.perf_counter()
    batches = [move_to_device(b, torch.device("cpu")) for b in calibration]
    # timed on the first batch's shape; every other batch size runs on that one graph
    quantized = inference.optimize(cpu_model, batches[0], "int8", calibration=batches, cache=False, max_batch_graphs=1)
    measured = {c.name: c for c in quantized.optimize_report.candidates}["int8"]
    return {
        "method": "static (PT2E, x86 inductor)",
        "linear_fraction": fraction,
        "calibration_samples": sum(len(b[0] if isinstance(b, tuple) else b) for b in batches),
        "speedup_over_fp32_eager": measured.speedup,
        **_metrics(evaluation(quantized, torch.device("cpu")), evaluation.cpu_baseline()),
        "seconds": time.perf_counter() - began,
    }


def _dynamic_int8(fraction: float, evaluation: _Evaluation) -> dict[str, Any]:
    """Dynamic int8 of the Linear layers: its accuracy against fp32 and the sizes before and after."""
    began = time.perf_counter()
    model = evaluation.model
    quantized = quantize_dynamic_int8(model)
    return {
        "method": "dynamic (Linear layers)",
        "linear_fraction": fraction,
        "size_bytes_before": state_dict_bytes(model),
        "size_bytes_after": state_dict_bytes(quantized),
        **_metrics(evaluation(quantized, torch.device("cpu")), evaluation.cpu_baseline()),
        "seconds": time.perf_counter() - began,
    }


def _pruning(evaluation: _Evaluation, amounts: Sequence[float]) -> list[dict[str, float]]:
    """Global magnitude pruning of copies of the model at each of ``amounts``, each evaluated."""
    rows = []
    for amount in amounts:
        began = time.perf_counter()
        pruned = copy.deepcopy(evaluation.model)
        sparsity = global_magnitude_prune(pruned, amount)
        rows.append(
            {
                "amount": amount,
                "sparsity": sparsity,
                **_metrics(evaluation(pruned), evaluation.baseline),
                "seconds": time.perf_counter() - began,
            }
        )
    return rows


def _export_all(
    summary: dict[str, Any], model: nn.Module, example_input: ExampleInput, out_dir: Path, dynamic_batch: bool
) -> None:
    """TorchScript, torch.export and ONNX files, each recorded in ``summary``: its result, its
    error, or why it was skipped (inputs that are not tensors, ONNX packages missing)."""
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    if not all(isinstance(a, torch.Tensor) for a in inputs):
        summary.update({key: {"skipped": NOT_TENSORS_REASON} for key in ("torchscript", "torch_export", "onnx")})
        return
    _attempt(
        summary,
        "torchscript",
        lambda: _in_folder(
            export_torchscript(model, example_input, out_dir / TORCHSCRIPT_FILE, dynamic_batch=dynamic_batch)
        ),
    )
    _attempt(
        summary,
        "torch_export",
        lambda: _in_folder(
            export_program(model, example_input, out_dir / EXPORTED_PROGRAM_FILE, dynamic_batch=dynamic_batch)
        ),
    )
    try:
        onnx_packages()
    except ZooError as missing:
        summary["onnx"] = {"skipped": str(missing)}
    else:
        _attempt(
            summary,
            "onnx",
            lambda: _in_folder(export_onnx(model, example_input, out_dir / ONNX_FILE, dynamic_batch=dynamic_batch)),
        )


def _in_folder(result: ExportResult) -> dict[str, Any]:
    """An export's record with its path relative to the output folder, which may move."""
    return {**asdict(result), "path": Path(result.path).name}
