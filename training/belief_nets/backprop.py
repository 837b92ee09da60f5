"""Supervised fine-tuning of a pretrained deep belief net: the unrolled net trained by backprop
through `zoo.training.loop.trainer.Trainer`, like every other zoo model (`finetune_dbn`), as
`BackpropConfig` says."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

from zoo.architectures.dbn import DBN
from zoo.errors import DataError, InvalidArgumentError
from zoo.training.belief_nets.contrastive import ArrayLike, visible_data
from zoo.training.loop.trainer import TrainConfig, Trainer

logger = logging.getLogger(__name__)


@dataclass
class BackpropConfig:
    """Supervised fine-tuning of the unrolled net: cross-entropy, SGD with momentum and L2 weight
    decay (on the weight matrices, not the biases), the learning rate annealed to 0 along a
    cosine over all steps, every epoch trained (no early stopping: the last epoch's weights are
    kept). `train_config` is how the `Trainer` runs it."""

    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 0.3  # sigmoid layers pass small gradients down; 0.1 fine-tunes slower
    momentum: float = 0.9
    weight_decay: float = 1e-4

    def train_config(
        self,
        device: torch.device | str,
        *,
        seed: int = 0,
        progress: bool = True,
        out_dir: str | os.PathLike | None = None,
    ) -> TrainConfig:
        """This fine-tuning as a `TrainConfig` (the one place the two meet). The rows already
        sit on ``device``, so the loader reads them there (no workers, no pinned memory); the
        Trainer writes logs, curves and checkpoints only with an ``out_dir``."""
        return TrainConfig(
            epochs=self.epochs,
            batch_size=self.batch_size,
            optimizer="sgd",
            lr=self.learning_rate,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            scheduler="cosine",  # stepped every optimizer step, down to min_lr=0
            warmup_epochs=0.0,
            min_lr=0.0,
            early_stopping_patience=None,
            device=str(device),
            precision="fp32",  # an estimator: the same numbers on every machine
            seed=seed,
            num_workers=0,
            pin_memory=False,
            progress=progress,
            out_dir=None if out_dir is None else os.fspath(out_dir),
        )


@dataclass
class BackpropEpochStats:
    epoch: int
    train_loss: float
    train_accuracy: float
    valid_loss: float | None
    valid_accuracy: float | None


def _as_targets(targets: ArrayLike, data: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``targets`` as class indices on ``data``'s device, one per row, each below ``num_classes``."""
    targets = torch.as_tensor(targets, device=data.device).long()
    if targets.shape != (data.shape[0],):
        raise DataError(f"targets must be class indices of shape ({data.shape[0]},), got {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= num_classes):
        raise DataError(
            f"targets must lie in [0, {num_classes}) for a {num_classes}-way head; reset_classifier to change it"
        )
    return targets


class _Rows(Dataset):
    """Labelled rows already on the model's device; the loader reads a whole batch with one
    indexing (``__getitems__``) instead of stacking single rows."""

    def __init__(self, data: torch.Tensor, targets: torch.Tensor) -> None:
        self.data, self.targets = data, targets

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index], self.targets[index]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, device=self.data.device)
        return self.data[index], self.targets[index]


def _collate_rows(batch: Any) -> Any:
    """A batch `_Rows.__getitems__` already made passes through; single rows are stacked."""
    return batch if isinstance(batch, tuple) else default_collate(batch)


@contextlib.contextmanager
def _own_random_state(device: torch.device) -> Iterator[None]:
    """Give back the caller's global random states (torch's on CPU and ``device``, NumPy's,
    Python's) afterwards: `Trainer.fit` seeds them all."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def finetune_dbn(
    model: DBN,
    data: ArrayLike,
    targets: ArrayLike,
    config: BackpropConfig | None = None,
    *,
    valid: tuple[ArrayLike, ArrayLike] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = True,
    out_dir: str | os.PathLike | None = None,
) -> list[BackpropEpochStats]:
    """Fine-tune the whole unrolled net (every RBM's weights and hidden biases, and the head) to
    classify ``data`` as ``targets`` (class indices) by backprop; returns per-epoch losses and
    accuracies, on ``valid = (data, targets)`` too when given. Leaves the model in eval mode.

    The loop is `zoo.training.loop.trainer.Trainer`'s, configured by `BackpropConfig.train_config`; like
    every Trainer run it drops each epoch's last partial batch (when there is a full one). Its
    seed (shuffling, dropout) is drawn from ``generator`` (torch's global generator without one);
    the caller's global random states are left as they were. With ``out_dir`` the Trainer writes
    its metrics, logs, curves and checkpoints there."""
    if model.num_classes == 0:
        raise InvalidArgumentError(
            "the model has no classifier (num_classes=0); call model.reset_classifier(num_classes) first"
        )
    config = config or BackpropConfig()
    reference = model.rbms[0].weight
    x = visible_data(data, reference, model.sizes[0], model.name)
    y = _as_targets(targets, x, model.num_classes)
    held_out = None
    if valid is not None:
        held_x = visible_data(valid[0], reference, model.sizes[0], model.name)
        held_out = _Rows(held_x, _as_targets(valid[1], held_x, model.num_classes))
    if config.epochs == 0:
        model.eval()
        return []
    source = generator.device if generator is not None else torch.device("cpu")
    seed = int(torch.randint(2**31 - 1, (), generator=generator, device=source))
    train_config = config.train_config(reference.device, seed=seed, progress=progress, out_dir=out_dir)
    with _own_random_state(reference.device):
        trainer = Trainer(model, train_config, collate_fn=_collate_rows)
        rows = trainer.fit(_Rows(x, y), held_out)
    model.eval()
    history = [
        BackpropEpochStats(int(r["epoch"]), r["train_loss"], r["train_acc"], r.get("val_loss"), r.get("val_acc"))
        for r in rows
    ]
    for stats in history:
        shown = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None and k != "epoch"}
        logger.info("fine-tune epoch %d: %s", stats.epoch, ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    return history
