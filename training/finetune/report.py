"""Evaluation after training: classification metrics computed with torch (accuracy, macro-F1,
per-class precision/recall, confusion matrix) and a confusion-matrix PNG. No scikit-learn at run
time; the tests check against it.

And the decision thresholds a multi-label model is saved with (`saved_thresholds`): chosen on the
validation set by the best epoch's weights (`zoo.training.loop.meter.multi_label_thresholds`: each
label's best-F1 threshold, or the pooled one for a label with few validation positives), recorded
in the model's config as ``multi_label: {"names", "thresholds"}`` beside logits that a sigmoid
makes probabilities of (``zoo predict`` and ``zoo serve`` return each label over its threshold)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from zoo.devices import model_device
from zoo.errors import DataError, InvalidArgumentError
from zoo.training.loop.meter import multi_label_thresholds
from zoo.training.loop.records.curves import figure, save_figure
from zoo.training.loop.steps import MultiLabelStep, move_to_device, split_batch

if TYPE_CHECKING:
    pass

Forward = Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]]


def classifier_forward(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Default ``forward``: the batch split by `zoo.training.loop.steps.split_batch` (``(inputs,
    targets)`` pairs, dicts with ``labels``, PyG batches with ``.y``) and the model called on
    the inputs (as keyword arguments when they are a dict)."""
    inputs, targets = split_batch(batch, other_batches="forward=fn(model, batch) returning (logits, targets)")
    return (model(**inputs) if isinstance(inputs, Mapping) else model(inputs)), targets


@dataclass
class ClassificationReport:
    """Metrics of a classifier on one dataset. ``confusion[i, j]`` counts samples of true class
    i predicted as j (scikit-learn's convention); ``predictions``/``targets`` keep the per-sample
    labels in loader order so two models can be compared sample by sample."""

    accuracy: float
    macro_f1: float
    precision: list[float]
    recall: list[float]
    f1: list[float]
    support: list[int]
    confusion: torch.Tensor
    class_names: list[str]
    predictions: torch.Tensor = field(repr=False)
    targets: torch.Tensor = field(repr=False)

    @property
    def num_samples(self) -> int:
        return int(self.targets.numel())

    def agreement(self, other: ClassificationReport) -> float:
        """Fraction of samples on which both models predict the same class (e.g. int8 vs fp32);
        both reports must come from the same data in the same order."""
        if not torch.equal(self.targets, other.targets):
            raise InvalidArgumentError(
                "the two reports were computed on different data or order; evaluate both "
                "models on the same unshuffled loader"
            )
        return (self.predictions == other.predictions).double().mean().item()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (per-class rows and the confusion matrix as nested lists)."""
        per_class = [
            {"class": name, "precision": p, "recall": r, "f1": f, "support": s}
            for name, p, r, f, s in zip(self.class_names, self.precision, self.recall, self.f1, self.support)
        ]
        return {
            "num_samples": self.num_samples,
            "accuracy": self.accuracy,
            "macro_f1": self.macro_f1,
            "per_class": per_class,
            "confusion_matrix": self.confusion.tolist(),
        }


def confusion_matrix(predictions: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``[num_classes, num_classes]`` int64 counts, rows true class, columns predicted class."""
    predictions, targets = predictions.reshape(-1).long(), targets.reshape(-1).long()
    if predictions.shape != targets.shape:
        raise InvalidArgumentError(
            f"predictions and targets need the same length, got {predictions.numel()} and {targets.numel()}"
        )
    for name, labels in (("targets", targets), ("predictions", predictions)):
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
            raise InvalidArgumentError(
                f"{name} must lie in [0, {num_classes}), got values in "
                f"[{labels.min().item()}, {labels.max().item()}]; check num_classes and the labels"
            )
    flat = torch.bincount(targets * num_classes + predictions, minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes).cpu()


def classification_report(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    num_classes: int,
    class_names: Sequence[str] | None = None,
) -> ClassificationReport:
    """Metrics from predicted and true labels. Precision, recall or F1 of a class with a zero
    denominator is 0; macro-F1 averages over the classes that occur in the targets or the
    predictions (scikit-learn's ``f1_score(average="macro")`` default)."""
    if class_names is None:
        class_names = [str(i) for i in range(num_classes)]
    if len(class_names) != num_classes:
        raise InvalidArgumentError(f"class_names has {len(class_names)} names but the model has {num_classes} classes")
    cm = confusion_matrix(predictions, targets, num_classes)
    tp, predicted, actual = cm.diag().double(), cm.sum(0).double(), cm.sum(1).double()

    def ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
        return torch.where(den > 0, num / den.clamp(min=1), torch.zeros_like(num))

    f1 = ratio(2 * tp, predicted + actual)
    seen = (predicted + actual) > 0
    total = int(cm.sum())
    return ClassificationReport(
        accuracy=tp.sum().item() / total if total else math.nan,
        macro_f1=f1[seen].mean().item() if seen.any() else math.nan,
        precision=ratio(tp, predicted).tolist(),
        recall=ratio(tp, actual).tolist(),
        f1=f1.tolist(),
        support=cm.sum(1).tolist(),
        confusion=cm,
        class_names=list(class_names),
        predictions=predictions.reshape(-1).long().cpu(),
        targets=targets.reshape(-1).long().cpu(),
    )


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module,
    loader: Any,
    *,
    device: torch.device | str | None = None,
    class_names: Sequence[str] | None = None,
    forward: Forward = classifier_forward,
    progress: bool = True,
) -> ClassificationReport:
    """Run ``model`` (in eval mode, restored afterwards) over ``loader`` and report accuracy,
    macro-F1, per-class precision/recall/F1 and the confusion matrix. ``device`` defaults to
    the model's; ``forward(model, batch) -> (logits, targets)`` adapts other batch layouts."""
    device = torch.device(device) if device is not None else model_device(model)
    was_training = model.training
    model.eval()
    predictions: list[torch.Tensor] = []
    targets: list[torch.Tensor] = []
    num_classes = None
    try:
        for batch in tqdm(loader, desc="evaluate", leave=False, disable=not progress):
            logits, target = forward(model, move_to_device(batch, device))
            if logits.ndim != 2:
                raise InvalidArgumentError(
                    f"evaluate_classifier expects logits of shape (N, num_classes), got {tuple(logits.shape)}"
                )
            num_classes = logits.shape[1]
            predictions.append(logits.argmax(1).cpu())
            targets.append(target.reshape(-1).cpu())
    finally:
        model.train(was_training)
    if num_classes is None:
        raise DataError("the loader yielded no batches; nothing to evaluate")
    return classification_report(torch.cat(predictions), torch.cat(targets), num_classes, class_names)


def plot_confusion_matrix(report: ClassificationReport, path: str | os.PathLike) -> Path:
    """PNG of the confusion matrix, coloured by row-normalised rate (recall per true class) and
    annotated with counts when there are at most 30 classes. Uses the Agg canvas directly,
    so no pyplot state or display is involved."""
    cm = report.confusion
    n = cm.shape[0]
    rates = cm.double() / cm.sum(1, keepdim=True).clamp(min=1)
    side = min(max(4.0, 0.5 * n + 2.0), 30.0)
    fig = figure(figsize=(side + 1.0, side))
    ax = fig.add_subplot()
    image = ax.imshow(rates.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, fraction=0.046, label="fraction of true class")
    if n <= 30:
        for i in range(n):
            for j in range(n):
                ax.text(
                    j,
                    i,
                    str(int(cm[i, j])),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if rates[i, j] > 0.5 else "black",
                )
        ax.set_xticks(range(n), report.class_names, rotation=45, ha="right")
        ax.set_yticks(range(n), report.class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"accuracy {report.accuracy:.4f}, macro-F1 {report.macro_f1:.4f} (n={report.num_samples})")
    return save_figure(fig, path)


DEFAULT_THRESHOLD = 0.5  # without validation data


@torch.no_grad()
def validation_scores(
    model: nn.Module, val_set: Dataset, collate_fn: Callable[[list[Any]], Any] | None, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sigmoid probabilities [N, K] of ``model`` (on its device, in eval mode) on
    ``val_set`` and its multi-hot targets [N, K]."""
    step, scores, targets = MultiLabelStep(keep_scores=True), [], []
    device = next(model.parameters()).device
    for batch in DataLoader(val_set, batch_size=batch_size, collate_fn=collate_fn):
        out = step(model, move_to_device(batch, device))
        scores.append(out.logs["cat/scores"].cpu())
        targets.append(out.logs["cat/targets"].cpu())
    return torch.cat(scores), torch.cat(targets)


def saved_thresholds(
    model: nn.Module, val_set: Dataset | None, collate_fn: Callable[[list[Any]], Any] | None, batch_size: int
) -> tuple[list[float], str]:
    """One threshold per output, and how they were chosen in words for the card."""
    num_labels = model.num_classes
    if val_set is None or len(val_set) == 0:  # type: ignore[arg-type]
        how = f"{DEFAULT_THRESHOLD} for every label (no validation data to choose them on)"
        return [DEFAULT_THRESHOLD] * num_labels, how
    was_training = model.training
    model.eval()
    scores, targets = validation_scores(model, val_set, collate_fn, batch_size)
    model.train(was_training)
    thresholds = multi_label_thresholds(scores.numpy(), targets.numpy())
    how = (
        f"best F1 on the {len(targets)} validation samples: per label where it has 5 positives or more there, "
        "else the best threshold over all labels pooled"
    )
    return [round(t, 6) for t in thresholds], how
