"""The model card (README.md) a fine-tuning run writes next to the model: what was trained on
what, how, and how well, with the results of the after-training report, exports,
quantization and pruning."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.utils.data import Dataset

from zoo.loading.saved import CARD_FILE
from zoo.store.files import write_bytes_atomic
from zoo.training.data.kinds import DataSource
from zoo.training.data.molecules.molecule_files import MoleculeSource
from zoo.training.finetune.options import FinetuneOptions
from zoo.training.loop.lr_finder import PLOT_FILE as LR_FINDER_PLOT
from zoo.training.loop.lr_finder import resumed_lr
from zoo.training.loop.train_config import TrainConfig
from zoo.training.loop.trainer import Trainer


@dataclass
class WallClock:
    """Where a run's wall time went, for the card: the training steps (the head phase's too),
    validation, the per-epoch extras (checkpoints, logs, curves), what came before the epochs
    (data, model, the speed and lr choices) and after them (best weights, exports). `timed`
    runs the epochs; ``head_s`` is the head phase's time."""

    started: float = field(default_factory=time.perf_counter)
    head_s: float = 0.0
    laps: list[float] = field(default_factory=list)

    def timed(self, fit: Callable[..., Any], *args: Any) -> Any:
        """``fit(*args)``, the epochs' start and end noted."""
        self.laps.append(time.perf_counter())
        try:
            return fit(*args)
        finally:
            self.laps.append(time.perf_counter())

    def split(self, history: list[dict[str, float]], trainer: Trainer) -> str | None:
        """The card's line; None for a resumed run (its history spans other processes)."""
        if trainer.config.resume or len(self.laps) != 2:
            return None
        total = time.perf_counter() - self.started
        steps = sum(row.get("epoch_time_s", 0.0) for row in history)
        val = sum(row.get("val_time_s", 0.0) for row in history)
        fit_began, fit_ended = (t - self.started for t in self.laps)
        parts = [
            ("training steps", steps + self.head_s, f"the head phase {self.head_s:.0f} s" if self.head_s else ""),
            ("validation", val, ""),
            ("per-epoch checkpoints, logs and curves", trainer.state.elapsed_s - steps - val, ""),
            ("before the epochs", fit_began - self.head_s + (fit_ended - fit_began - trainer.state.elapsed_s),
             "data, model, speed and lr choice"),
            ("after them", total - fit_ended, "best weights, exports"),
        ]  # fmt: skip
        shown = ", ".join(
            f"{name} {s:.1f} s ({s / total:.0%}{f'; {why}' if why else ''})" for name, s, why in parts if s > 0.05
        )
        return f"{total:.1f} s: {shown}"


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
        *([f"- wall time: {details['wall_time']}"] if details.get("wall_time") else []),
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
    elif quantization.get("skipped") == "quantize=False":
        lines.append("- int8 quantization and magnitude pruning: not measured (`--compression` measures them)")
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


def run_details(
    name: str,
    base: str | None,
    source: DataSource,
    options: FinetuneOptions,
    trainer: Trainer,
    datasets: tuple[Dataset, Dataset | None],
    trainable: int,
    recipe: list[str],
) -> dict[str, Any]:
    """What the card says of the run besides its config, metrics and epochs run."""
    train_set, val_set = datasets
    return {
        "name": name,
        "base": base,
        "data": source.description,
        "mode": options.mode,
        "stages": options.stages if options.mode == "partial" else None,
        "layer_decay": options.layer_decay,
        "trainable": trainable,
        "train_samples": len(train_set),  # type: ignore[arg-type]
        "val_samples": len(val_set) if val_set is not None else 0,  # type: ignore[arg-type]
        "monitor": trainer.monitor,
        "stopped_early": trainer.state.stopped_early,
        "distillation": str(options.distill) if options.distill else None,
        "setting": trainer.setting.name,  # what precision auto chose, or the one asked for
        "speed": str(trainer.speed_report) if trainer.speed_report is not None else None,
        "loading": trainer.loading_note,
        "lr_auto": lr_auto(trainer) if trainer.config.lr == "auto" else None,
        "recipe": recipe,
        **task_details(source, options),
    }


def lr_auto(trainer: Trainer) -> str:
    """What ``lr="auto"`` chose: the sweep's report, or for a resumed run the value its optimizer holds."""
    if trainer.lr_report is not None:
        return str(trainer.lr_report)
    return f"{resumed_lr(trainer.optimizer):.3g} (chosen by the run this one resumes; its curve in {LR_FINDER_PLOT})"


def task_details(source: DataSource, options: FinetuneOptions) -> dict[str, Any]:
    """The card's facts on the task: the regression target and loss, how validation was made."""
    split = source.split_by if isinstance(source, MoleculeSource) else "random"
    if options.val_data is not None:
        split = f"none: the separate data {options.val_data} (--val-data)"
    elif options.val_fraction == 0:
        split = "none (--val-fraction 0)"
    elif source.split_note:
        split = source.split_note
    return {"target": source.target, "loss": options.loss if source.target else None, "split": split}
