"""``zoo eval RUN --data FILE``: a model (a ``zoo finetune`` run folder, a folder `zoo.save`
wrote, or weights by name) scored on a held-out file of any kind the training readers take
(`zoo.training.data.kinds.open_data`: image folders, text rows, tensors, shards, molecules).

The file's labels are mapped to the model's outputs by name (the class names, label names or
target the run saved), so a test file may hold fewer classes than the training data, in another
order; a class the model does not know is refused by name. The metrics are the task's:
accuracy and macro-F1 (and top-5 accuracy above five classes) for classes; mAP and micro and
macro F1 at the saved thresholds for multi-label; MAE, RMSE and R² in the target's units for
a regression."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

import zoo
from zoo.errors import DataError, InvalidArgumentError
from zoo.inference.predictor import model_outputs
from zoo.loading.outputs import OutputMeaning, describe_task, output_meaning
from zoo.loading.transforms import text_length
from zoo.store import weight_entries
from zoo.training.data.images.image_lists import is_image_list
from zoo.training.data.kinds import TENSOR_SUFFIXES, DataSource, open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions, is_molecule_file
from zoo.training.data.source import for_scoring
from zoo.training.finetune.report import classification_report
from zoo.training.loop.meter import multi_label_metrics, regression_metrics
from zoo.training.loop.steps import regression_sums, split_batch

TOP5_ABOVE = 5  # classes: top-5 accuracy is reported for models of more classes than this


def score_file(
    name: str,
    data: str | os.PathLike,
    *,
    device: str = "cpu",
    batch_size: int = 64,
    progress: bool = True,
    reading: MoleculeOptions | None = None,
    images: str | os.PathLike | None = None,
    num_workers: int = 0,
) -> dict[str, Any]:
    """The metrics of the model ``name`` on the labelled file ``data`` (see the module docstring),
    with what was scored: ``{"model", "data", "task", "samples", <metrics>...}``. ``reading``
    says which field is the label and what separates tags (its task is the model's); ``images``
    is the folder an image list's paths are under."""
    model = zoo.load(name, device=device).eval()
    cfg = model.pretrained_cfg
    if cfg.get("features_only") or not cfg.get("num_classes"):
        raise InvalidArgumentError(
            f"{name} outputs feature maps, not predictions (a features-only model or one without a head): "
            "zoo eval --data scores a classifier's or a regression's weights"
        )
    meaning = output_meaning(cfg)
    width = int(cfg["num_classes"])
    if meaning.task == "regression" and width > 1:  # the file's readers give one value a sample: refused first
        named = f" ({', '.join(meaning.output_names[:3])}, ...)" if meaning.output_names else ""
        raise DataError(
            f"{name} predicts {width} values{named}, and {data} labels one: zoo eval --data scores a model of one "
            f"output a sample; fine-tune it on the file first (zoo finetune {name} --data FILE)"
        )
    with for_scoring():  # a test file of one class is scored as any other
        source = _open(name, data, model, meaning, reading or MoleculeOptions(), images)
    order = _label_order(name, data, source, meaning, width)  # before the model runs
    ranked = meaning.task == "classes"  # classes: the top 5 of each sample are all the metrics need
    outputs, targets = _predict(model, source, (batch_size, num_workers), progress, ranked)
    metrics = _metrics(meaning, outputs, _mapped(meaning, targets, order, width), width)
    return {"model": name, "data": str(data), "task": describe_task(meaning), "samples": len(targets), **metrics}


def evaluate(
    model: str | os.PathLike,
    data: str | os.PathLike,
    *,
    label_field: str | None = None,
    images: str | os.PathLike | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    num_workers: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """``zoo.evaluate``: the metrics of ``model`` (a name or a run's folder) on the labelled
    ``data`` (an image folder or list, text rows, tensors, shards, molecules), as ``zoo eval
    MODEL --data DATA`` prints them: ``{"model", "data", "task", "samples", "accuracy",
    "macro_f1", ...}`` for classes, ``mae``, ``rmse``, ``r2`` for a regression (in the target's
    units), ``map`` and the F1 scores for multi-label. ``label_field`` names the label column
    (default: the one the run was trained on); ``images`` the folder an image list's paths are under."""
    if not isinstance(model, str | os.PathLike) or not isinstance(data, str | os.PathLike):
        raise InvalidArgumentError("zoo.evaluate(model, data): a model name or run folder, and a data path")
    reading = MoleculeOptions(label_field=label_field) if label_field is not None else None
    options = {"device": device, "batch_size": batch_size, "num_workers": num_workers, "progress": progress}
    return score_file(os.fspath(model), data, reading=reading, images=images, **options)


TASKS = {"classes": "classification", "regression": "regression", "multi_label": "multi-label"}


def _open(
    name: str,
    data: str | os.PathLike,
    model: nn.Module,
    meaning: OutputMeaning,
    reading: MoleculeOptions,
    images: str | os.PathLike | None,
) -> DataSource:
    """The file through the training readers, read for the model's task, checked to hold what the model reads."""
    reads = weight_entries.input_kind(model.pretrained_cfg["architecture"])
    if reads == "graphs" and Path(data).expanduser().is_dir():
        raise DataError(
            f"{name} reads molecules, and {data} is a folder: score it on a .csv/.jsonl with a smiles column"
        )
    _check_table_kind(name, Path(data).expanduser(), reads, images)
    reading = dataclasses.replace(reading, task=TASKS[meaning.task], graph_model=name if reads == "graphs" else None)
    length = text_length(model)
    # the label column training was given, or a regression's target (its column's name)
    remembered = model.pretrained_cfg.get("label_field") or meaning.target_name
    if reading.label_field is None and remembered and Path(data).suffix.lower() not in TENSOR_SUFFIXES:
        source = _remembered_column(name, data, remembered, reading, length, images)
    else:
        source = open_data(data, max_length=length, molecules=reading, images=images)
    head = model.pretrained_cfg.get("head")
    if reads == "text" and head != "sequence_classification":
        raise InvalidArgumentError(
            f"{name} has head {head!r}; zoo eval --data scores text classifiers (head sequence_classification); "
            "a language model's card is re-measured by zoo eval NAME"
        )
    holds = source.kind if source.kind != "tensors" else "images" if source.image_size else "vectors"
    if holds != reads:
        raise DataError(f"{name} reads {reads}, and {source.description} holds {holds}: score it on {reads}")
    return source


_TABLE_KINDS = {
    "images": "a list of images (a file_name column)",
    "graphs": "molecules (a smiles column)",
    "text": "text rows (no file_name or smiles column)",
}


def _check_table_kind(name: str, path: Path, reads: str, images: str | os.PathLike | None) -> None:
    """Refuse a .csv/.jsonl of another kind of data than the model reads by the kind, before it is
    read by the model's label column: the column's absence would hide that it is the wrong file."""
    if path.suffix.lower() not in (".csv", ".jsonl") or not path.is_file():
        return
    holds = "images" if images is not None or is_image_list(path) else "graphs" if is_molecule_file(path) else "text"
    if holds != reads and (reads, holds) != ("graphs", "text"):  # the molecule reader names the smiles column
        raise DataError(f"{name} reads {reads}, and {path} holds {_TABLE_KINDS[holds]}: score it on {reads}")


def _remembered_column(
    name: str,
    data: str | os.PathLike,
    remembered: str,
    reading: MoleculeOptions,
    length: int,
    images: str | os.PathLike | None,
) -> DataSource:
    """The file read by the label column the model was trained on; a file without a usable one
    is read by its default label column, with a warning naming both; when that fails too, the
    refusal is the remembered column's (the one the user's file was meant to have)."""
    try:
        return open_data(
            data, max_length=length, molecules=dataclasses.replace(reading, label_field=remembered), images=images
        )
    except DataError as error:
        refused = error
        try:
            source = open_data(data, max_length=length, molecules=reading, images=images)
        except DataError:
            raise refused from None
    warnings.warn(
        f"{data}: scored by its default label column, not {remembered!r}, the column {name} was trained on "
        f"(label_field in its config.json), which this file cannot give ({str(refused)[:160]}); "
        "--label-field COLUMN names the column to score",
        stacklevel=3,
    )
    return source


def _predict(
    model: nn.Module, source: DataSource, loading: tuple[int, int], progress: bool, ranked: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's float outputs [N, K] (with ``ranked``, only the indices of each sample's top 5
    classes, most probable first: a large set of many classes fits in memory) and the file's
    targets, in file order (on the CPU)."""
    transform = zoo.transforms(model) if source.kind == "images" else None
    batch_size, workers = loading  # samples per forward pass, data-loading processes
    loader = DataLoader(
        source.full(transform), batch_size=batch_size, shuffle=False, collate_fn=source.collate_fn, num_workers=workers
    )
    device = next(model.parameters()).device
    outputs, targets = [], []
    shown = progress and source.num_samples > 4 * batch_size  # a bar for sets of several batches
    bar = tqdm(total=source.num_samples, desc="zoo eval", unit="sample", leave=False, disable=not shown)
    try:
        for batch in loader:
            inputs, target = split_batch(batch, other_batches="a file zoo's readers take")
            out = model_outputs(model, inputs, device)  # zoo predict's forward: float [N, K] on the CPU
            outputs.append(out.topk(min(5, out.shape[-1]), dim=-1).indices if ranked else out)
            targets.append(target.cpu())
            bar.update(len(target))
    finally:
        bar.close()
    if not outputs:
        raise DataError(f"{source.description} holds no samples to score")
    return torch.cat(outputs), torch.cat(targets)


def _label_order(
    name: str, data: str | os.PathLike, source: DataSource, meaning: OutputMeaning, width: int
) -> torch.Tensor | None:
    """The model's output index of each of the file's classes (or labels), by name; None for a
    regression. A class the model does not know is refused by name."""
    if meaning.task == "regression":
        return None
    known = meaning.names or [str(i) for i in range(width)]  # a model without names: classes 0, 1, ...
    index = {label: i for i, label in enumerate(known)}
    unknown = [label for label in source.class_names or [] if label not in index]
    if unknown:
        what = ("label", "labels") if meaning.task == "multi_label" else ("class", "classes")
        listed = ", ".join(map(repr, known[:12])) + (", ..." if len(known) > 12 else "")
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise DataError(
            f"{data}: {what[0]} {unknown[0][:80]!r}{more} is not one of the {len(known)} {what[1]} {name} knows "
            f"({listed}); drop its samples, or score a model trained on it"
        )
    return torch.tensor([index[label] for label in source.class_names or []], dtype=torch.long)


def _mapped(meaning: OutputMeaning, targets: torch.Tensor, order: torch.Tensor | None, width: int) -> torch.Tensor:
    """The file's targets in the model's terms: class indices (or multi-hot columns) renumbered by
    ``order``; a regression's values as they are (the target's units, float64)."""
    if order is None:
        return targets.double().reshape(len(targets), -1)
    if meaning.task == "classes":
        return order[targets.long().reshape(-1)]
    hot = torch.zeros(len(targets), width)
    hot[:, order] = targets.float().reshape(len(targets), -1)
    return hot


def _metrics(meaning: OutputMeaning, outputs: torch.Tensor, targets: torch.Tensor, width: int) -> dict[str, Any]:
    if meaning.task == "regression":
        predictions = meaning.values(outputs)  # float64, in the target's units
        sums = regression_sums(predictions, targets, float(targets.mean()))
        return regression_metrics({k: float(v) for k, v in sums.items()})
    if meaning.task == "multi_label":
        thresholds = meaning.thresholds or [0.5] * outputs.shape[1]
        return multi_label_metrics(outputs.sigmoid().numpy(), (targets > 0.5).numpy(), thresholds)
    return class_metrics(outputs, targets, meaning.names, width)


def class_metrics(ranked: torch.Tensor, targets: torch.Tensor, names: list[str] | None, width: int) -> dict[str, Any]:
    """Accuracy and macro-F1 (fractions), top-5 accuracy above five classes, and per class, from
    each sample's top classes ``ranked`` [N, up to 5] (most probable first) of ``width``."""
    report = classification_report(ranked[:, 0], targets, width, names)
    metrics: dict[str, Any] = {"accuracy": report.accuracy, "macro_f1": report.macro_f1}
    if width > TOP5_ABOVE:
        metrics["top5"] = (ranked[:, :5] == targets.reshape(-1, 1)).any(-1).double().mean().item()
    return {**metrics, "per_class": report.to_dict()["per_class"]}


def format_scores(scores: Mapping[str, Any]) -> list[str]:
    """The lines ``zoo eval --data`` prints: what was scored, then one metric a line."""
    lines = [f"{scores['model']} on {scores['data']}: {scores['samples']} samples, {scores['task']}"]
    for key, value in scores.items():
        if key in ("model", "data", "task", "samples") or not isinstance(value, float):
            continue
        lines.append(f"  {key:<10}{value:.4f}")
    return lines


__all__ = ["class_metrics", "format_scores", "score_file"]
