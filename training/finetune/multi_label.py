"""The decision thresholds a multi-label model is saved with: chosen on the validation set by
the best epoch's weights (`zoo.training.loop.meter.multi_label_thresholds`: each label's best-F1
threshold, or the pooled one for a label with few validation positives), recorded in the
model's config as ``multi_label: {"names", "thresholds"}`` beside logits that a sigmoid makes
probabilities of (``zoo predict`` and ``zoo serve`` return each label over its threshold)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from zoo.training.loop.meter import multi_label_thresholds
from zoo.training.loop.steps import MultiLabelStep, move_to_device

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
