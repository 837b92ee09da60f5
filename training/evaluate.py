"""The evaluations that the project's weight cards quote, by task name, so `zoo eval NAME`
re-measures a card and the tests check a slice of it.

A task takes a model and ``limit`` (the first ``limit`` test samples, or all) and returns its
metrics. Accuracies are in percent; `compare` allows 0.2 points for them and 1% (relative)
for other metrics (losses, error ratios, bits per byte).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo
from training.data import load_fashion_mnist
from training.report import logits_of

Task = Callable[[nn.Module, int | None], dict[str, float]]
TASKS: dict[str, Task] = {}
ACCURACY_TOLERANCE = 0.2  # percentage points
RELATIVE_TOLERANCE = 0.01


def task(name: str) -> Callable[[Task], Task]:
    """Register an evaluation task under ``name``."""

    def register(fn: Task) -> Task:
        TASKS[name] = fn
        return fn

    return register


def task_key(name: str, limit: int | None) -> str:
    """The metrics key of a task on its first ``limit`` samples: ``"fashion-mnist[:1000]"``."""
    return name if limit is None else f"{name}[:{limit}]"


@torch.inference_mode()
def _classify(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 500) -> dict[str, float]:
    """Top-1 accuracy (percent) and mean cross-entropy of ``model`` on prepared inputs."""
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(inputs), batch_size):
        logits = logits_of(model(inputs[start : start + batch_size])).float()
        y = targets[start : start + batch_size]
        correct += int((logits.argmax(-1) == y).sum())
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
    return {"top1": 100.0 * correct / len(inputs), "loss": loss / len(inputs)}


@task("fashion-mnist")
def fashion_mnist(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Image classifiers on the official 10k test images, through the weights' preprocessing."""
    images, labels = load_fashion_mnist("test")
    images, labels = images[:limit, None], labels[:limit]
    prepared = zoo.transforms(model)(images)
    return _classify(model, prepared, labels)


@task("fashion-mnist-pixels")
def fashion_mnist_pixels(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Vector models (DBNs) on the official 10k test images as 784 pixels scaled to [0, 1]."""
    images, labels = load_fashion_mnist("test")
    return _classify(model, images[:limit].reshape(-1, 784).float() / 255, labels[:limit])


@task("digits-nudged")
def digits_nudged(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """scikit-learn's nudged digits test split (1797 vectors of 64 pixels in [0, 1])."""
    from training.digits import load_nudged_digits

    _, x_test, _, y_test = load_nudged_digits()
    return _classify(model, torch.from_numpy(x_test[:limit]).float(), torch.from_numpy(y_test[:limit]).long())


@task("triangles-er")
def triangles_er(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Triangle counting on Erdős–Rényi graphs (Chen et al., 2020): test MSE / label variance."""
    from torch_geometric.loader import DataLoader

    from architectures.graph import AddTriangles
    from training.graph_data import TriangleCounting, normalized_mse

    test = TriangleCounting("er", "test", pre_transform=AddTriangles())
    test = test[:limit] if limit is not None else test
    model.eval()
    predictions, targets = [], []
    with torch.inference_mode():
        for batch in DataLoader(test, batch_size=256):
            predictions.append(model(batch).float().reshape(-1))
            targets.append(batch.y.reshape(-1))
    prediction, target = torch.cat(predictions), torch.cat(targets)
    return {"nmse": normalized_mse(prediction, target), "mae": float((prediction - target).abs().mean())}


def evaluate(model: nn.Module, task_name: str, limit: int | None = None) -> dict[str, float]:
    """Run the task ``task_name`` on ``model`` (the first ``limit`` test samples, or all)."""
    if task_name not in TASKS:
        raise ValueError(f"unknown evaluation task {task_name!r}; known: {', '.join(sorted(TASKS))}")
    return TASKS[task_name](model, limit)


def within_tolerance(metric: str, measured: float, claimed: float) -> bool:
    """Accuracies (percent) within 0.2 points; other metrics within 1% of the claim."""
    if metric in ("top1", "top5", "accuracy"):
        return abs(measured - claimed) <= ACCURACY_TOLERANCE + 1e-9
    return math.isclose(measured, claimed, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9)


def compare(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Load the weights ``name``, run its card's evaluation and compare with the card: one row
    per claimed metric, with ``ok`` telling whether it is within tolerance."""
    info = zoo.info(name)
    if info.eval_task is None:
        raise ValueError(f"{info.name} has no evaluation task (published weights: see their card, {info.card})")
    key = task_key(info.eval_task, limit)
    claimed: Mapping[str, float] | None = info.metrics.get(key)
    if claimed is None:
        slices = [k for k in info.metrics if k.startswith(f"{info.eval_task}[")]
        raise ValueError(
            f"the card of {info.name} claims nothing for {key!r}; evaluate it in full (no limit)"
            + (f" or on {', '.join(slices)}" if slices else "")
        )
    measured = evaluate(zoo.load(info.name), info.eval_task, limit)
    return [
        {"task": key, "metric": metric, "claimed": value, "measured": measured[metric],
         "ok": within_tolerance(metric, measured[metric], value)}
        for metric, value in claimed.items()
    ]
