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
        f"- classes ({model.num_classes}): {', '.join(model.pretrained_cfg.get('class_names') or [])}",
        f"- preprocessing: `{json.dumps(model.pretrained_cfg.get('preprocess') or {})}`",
        "",
        "## Training",
        "",
        f"- mode: {details['mode']}"
        + (f" (last {details['stages']} stages)" if details["stages"] else "")
        + (f", layer-wise lr decay {details['layer_decay']}" if details["layer_decay"] else ""),
        f"- trainable parameters: {details['trainable']:,} of {sum(p.numel() for p in model.parameters()):,}",
        f"- {config.optimizer}, lr {config.lr}, weight decay {config.weight_decay}, schedule {config.scheduler}, "
        f"batch {config.batch_size} x {config.accum_steps} accumulation, precision {config.precision}"
        + (f", EMA {config.ema_decay}" if config.ema_decay else ""),
        *([f"- distillation: {details['distillation']}"] if details["distillation"] else []),
        f"- epochs run: {details['epochs_run']}" + (" (stopped early)" if details["stopped_early"] else ""),
        "",
        "## Metrics (best epoch by " + details["monitor"] + ")",
        "",
        "| metric | value |",
        "| --- | --- |",
        *(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()),
        "",
        *_post_training_lines(after),
        'Load it with `zoo.load("<this directory>")`; `zoo.transforms(model)` gives its preprocessing.',
        "",
    ]
    write_bytes_atomic(out / CARD_FILE, "\n".join(lines).encode())


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
