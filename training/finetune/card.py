"""The model card (README.md) a fine-tuning run writes next to the model: what was trained on
what, how, and how well, with the results of the after-training report, exports,
quantization and pruning."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import torch.nn as nn

from zoo.loading.saved import CARD_FILE
from zoo.store.files import write_bytes_atomic
from zoo.training.loop.train_config import TrainConfig


def write_card(
    out: Path,
    model: nn.Module,
    details: dict[str, Any],
    metrics: dict[str, float],
    after: dict[str, Any] | None,
    config: TrainConfig,
    command: str | None,
) -> None:
    """README.md: what was trained on what, how, and how well."""
    arch = model.pretrained_cfg["architecture"]
    lines = [
        f"# {arch} fine-tuned on {details['data'].split(' (')[0]}",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}",
        f"- starting weights: {details['base'] or 'none (trained from scratch)'}",
        f"- command: `{command}`" if command else "- command: (Python API)",
        "",
        "## Data",
        "",
        f"- {details['data']}",
        f"- training samples: {details['train_samples']}, validation samples: {details['val_samples']}",
        *_task_lines(model, details),
        "",
        "## Training",
        "",
        f"- mode: {details['mode']}"
        + (f" (last {details['stages']} stages)" if details["stages"] else "")
        + (f", layer-wise lr decay {details['layer_decay']}" if details["layer_decay"] else ""),
        f"- trainable parameters: {details['trainable']:,} of {sum(p.numel() for p in model.parameters()):,}",
        f"- {config.optimizer}, lr {config.lr}, weight decay {config.weight_decay}, schedule {config.scheduler}, "
        f"batch {config.batch_size} x {config.accum_steps} accumulation, precision {config.precision}"
        + (f" ({details['setting']})" if details.get("setting") else "")
        + (f", EMA {config.ema_decay}" if config.ema_decay else ""),
        *([f"- lr auto: {details['lr_auto']}"] if details.get("lr_auto") else []),
        *(f"- {line}" for line in details.get("recipe") or []),
        *([f"- data loading: {details['loading']}"] if details.get("loading") else []),
        *([f"- distillation: {details['distillation']}"] if details["distillation"] else []),
        f"- epochs run: {details['epochs_run']}" + (" (stopped early)" if details["stopped_early"] else ""),
        *([f"- tracked in MLflow: {details['tracking']} (mlflow_run.json)"] if details.get("tracking") else []),
        *(
            ["", "Precision auto measured (`zoo.training.loop.speed`):", "", "```", details["speed"], "```"]
            if details.get("speed")
            else []
        ),
        "",
        "## Metrics (best epoch by " + details["monitor"] + ")",
        "",
        "| metric | value |",
        "| --- | --- |",
        *(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()),
        "",
        *_post_training_lines(after),
        _usage_line(model),
        "",
    ]
    write_bytes_atomic(out / CARD_FILE, "\n".join(lines).encode())


def _task_lines(model: nn.Module, details: dict[str, Any]) -> list[str]:
    """The card's lines on what the model predicts: the classes, or the regression target and
    its standardisation; the validation split and the inputs' preprocessing."""
    cfg = model.pretrained_cfg
    target, multi_label = details.get("target"), cfg.get("multi_label")
    if multi_label:
        pairs = ", ".join(f"{n} ({t:.3g})" for n, t in zip(multi_label["names"], multi_label["thresholds"]))
        lines = [
            f"- multi-label, {model.num_classes} labels with their decision thresholds: {pairs}",
            "- one sigmoid per label, binary cross-entropy; the model outputs logits, a label is predicted when its "
            f"probability reaches its threshold; thresholds: {details.get('thresholds')}",
            "- metrics: val_map is the mean average precision over the labels with a positive (scikit-learn's "
            "average_precision_score, macro); val_f1_micro and val_f1_macro are at the thresholds",
        ]
    elif target is None:
        lines = [f"- classes ({model.num_classes}): {', '.join(cfg.get('class_names') or [])}"]
    else:
        where = (
            "kept outside the model, too far from zero for a float32 head: `model(x)` outputs standardised "
            "values, and zoo predict, eval, serve and the MLflow model return x * std + mean in float64"
            if target.get("standardised")
            else f"folded into the head: the model outputs {target['name']} in its own units"
        )
        lines = [
            f"- regression of {target['name']!r}: {details.get('loss') or 'mse'} loss on the target standardised by "
            f"mean {target['mean']!r} and std {target['std']!r} ({where}; MAE, RMSE and R² below are in the "
            "target's units)"
        ]
    lines.append(f"- validation split: {details.get('split', 'random')}")
    if cfg.get("input_format"):
        return [*lines, f"- inputs: molecules as graphs ({cfg['input_format']}; RDKit, PyG's atom and bond features)"]
    return [*lines, f"- preprocessing: `{json.dumps(cfg.get('preprocess') or {})}`"]


def _usage_line(model: nn.Module) -> str:
    """How to use the saved model."""
    if model.pretrained_cfg.get("input_format"):
        return 'Predict with `zoo predict <this directory> "CCO" "c1ccccc1O"`, or `zoo serve <this directory>`.'
    return 'Load it with `zoo.load("<this directory>")`; `zoo.transforms(model)` gives its preprocessing.'


def _post_training_lines(after: dict[str, Any] | None) -> list[str]:
    """The card's section on the evaluation report, exports, quantization and pruning."""
    if after is None:
        return []
    evaluation = after["evaluation"]
    lines = [
        "## After training (validation set)",
        "",
        f"- accuracy {evaluation['accuracy']:.4f}, macro-F1 {evaluation['macro_f1']:.4f} on "
        f"{evaluation['num_samples']} samples (eval_report.json, confusion_matrix.png)",
    ]
    for key, label in (("torchscript", "TorchScript"), ("torch_export", "torch.export"), ("onnx", "ONNX")):
        result = after.get(key, {})
        if "error" in result:
            lines.append(f"- {label}: failed ({result['error']})")
        elif "skipped" in result:
            lines.append(f"- {label}: skipped ({result['skipped']})")
        elif result:
            lines.append(
                f"- {label}: {Path(result['path']).name}, {result['size_bytes'] / 2**20:.2f} MiB, "
                f"max difference to eager {result['max_abs_diff']:.2g}"
            )
    quantization = after.get("quantization", {})
    label = f"int8 quantization, {quantization['method']}" if "method" in quantization else "int8 quantization"
    if "error" in quantization:
        lines.append(f"- {label}: failed ({quantization['error']})")
    elif "skipped" in quantization:
        lines.append(f"- {label}: skipped ({quantization['skipped']})")
    elif "speedup_over_fp32_eager" in quantization:
        lines.append(
            f"- {label}: accuracy {quantization['accuracy']:.4f}, top-1 agreement with fp32 "
            f"{quantization['agreement']:.4f}, {quantization['speedup_over_fp32_eager']:.2f}x fp32 eager "
            f"on this CPU, calibrated on {quantization['calibration_samples']} validation samples"
        )
    else:
        sizes = f"{quantization['size_bytes_before'] / 2**20:.2f} -> {quantization['size_bytes_after'] / 2**20:.2f} MiB"
        lines.append(f"- {label}: accuracy {quantization['accuracy']:.4f}, {sizes}")
    pruning = after.get("pruning", [])
    if isinstance(pruning, dict):
        lines.append(f"- magnitude pruning: failed ({pruning['error']})")
    else:
        lines += [
            f"- magnitude pruning {row['amount']:.0%} (sparsity {row['sparsity']:.2f}): accuracy {row['accuracy']:.4f}"
            for row in pruning
        ]
    return [*lines, ""]
