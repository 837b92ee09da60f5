"""Training defaults that depend on the data: what `finetune` uses for the `TrainConfig` fields
(and the head phase and augmentation of `FinetuneOptions`) a user did not set. Every value was
measured on validation splits, never on test splits.

Molecules train from scratch on a few hundred to a few thousand graphs, where the general
defaults stop long before the validation loss does: they get a budget of optimizer steps spread
over as many epochs as the data set's size needs, a warmup and gradient clipping, and no early
stopping: the cosine schedule runs to its end and the best epoch on validation is kept (stopping
after 20 epochs without a better validation loss cut TPSA's runs while the rate was still high).
The values were chosen on the validation splits of the molecule sets (docs/families/graph.md).
A fresh class head on a pretrained molecule backbone trains with the body from the first step,
as a regression's head always does (`head_epochs`): a head phase (tried for regression in a
working copy) raised the validation RMSE on three of four regression sets, and it tied on the
solubility classes' validation accuracy over six seeds.

Everything else (images, text, vectors) gets a budget of `TRANSFER_STEPS` optimizer steps in
`TRANSFER_EPOCHS` epochs at the least and most, a batch size that suits the set's size
(`transfer_batch_size`: a tiny set gets small batches, so enough optimizer steps), a warmup of
`WARMUP_SHARE` of the run, and for small images (at most `SMALL_IMAGE` pixels a side) random
crops after a padding of `crop_padding` pixels. A model that starts from weights with a fresh
head first trains the head alone (`HEAD_SHARE` of the epochs, the body frozen, at
`HEAD_LR_FACTOR` times the learning rate). Each was measured against its alternative (no head
phase, no augmentation, layer decay, a longer budget) on the validation splits of the transfer
suite (``benchmarks/transfer.py``, docs/results.md); none won by more than twice the standard
error of its paired difference, so the recipe is the one fastai and the CIFAR-style training use."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from typing import Any

from torch.utils.data import Dataset

from zoo.training.data.images.augment import Augment
from zoo.training.data.kinds import DataSource
from zoo.training.data.molecules.molecule_files import MoleculeSource
from zoo.training.loop.train_config import TrainConfig

# Molecules: about this many optimizer steps, in MOLECULE_EPOCHS epochs at the least and most.
MOLECULE_STEPS = 3000
MOLECULE_EPOCHS = (30, 150)
MOLECULE_FIELDS: dict[str, Any] = {"lr": 1e-3, "weight_decay": 1e-4, "warmup_epochs": 2.0, "clip_grad_norm": 5.0}

# Images, text and vectors: about this many optimizer steps, in TRANSFER_EPOCHS epochs at the least and most.
TRANSFER_STEPS = 400
TRANSFER_EPOCHS = (3, 50)
BATCH_SIZES = ((500, 16), (2000, 32))  # (training samples below, batch size); larger sets: TrainConfig's 64
WARMUP_SHARE = 0.05  # of the epochs
SMALL_IMAGE = 64  # pixels a side at most: random crops of a padded image (the CIFAR recipe)
HEAD_SHARE = 0.1  # of the epochs: a fresh head trains alone first (0: no head phase)
HEAD_LR_FACTOR = 10.0


# why --head-epochs did nothing: the runs whose head is not fresh, or not trained alone
NO_HEAD_PHASE = (
    "it trains a fresh class head on pretrained weights alone, and this run has none (a regression's head, "
    "the weights' own classes, a resumed run or linear-probe mode)"
)


def head_epochs(source: DataSource, asked: float | None) -> float | None:
    """The head phase's length: ``asked`` when given, else none for molecules and None (a
    `HEAD_SHARE` of the epochs) for everything else."""
    if asked is None and isinstance(source, MoleculeSource):
        return 0.0
    return asked


def transfer_batch_size(train_samples: int) -> int:
    """The batch size of a set of ``train_samples`` (`BATCH_SIZES`)."""
    return next((size for below, size in BATCH_SIZES if train_samples < below), TrainConfig.batch_size)


def default_augment(preprocess: dict[str, Any], image_size: tuple[int, int] | None) -> Augment:
    """The augmentation images have when none is asked, from the side the model gets them at
    (the ``preprocess``'s crop or resize, else ``image_size``): for small images, a padding of
    a fourteenth of the side (2 pixels at 28) and random crops back (`Augment()`: none, for
    larger images)."""
    size = preprocess.get("crop") or preprocess.get("resize") or image_size
    side = min(size) if isinstance(size, (list, tuple)) else size
    return Augment(crop_padding=max(1, round(side / 14))) if side is not None and side <= SMALL_IMAGE else Augment()


def data_defaults(source: DataSource, train_samples: int, batch_size: int, steps: int | None = None) -> dict[str, Any]:
    """The TrainConfig fields the data chooses: for molecules, epochs from ``steps``
    (`MOLECULE_STEPS`) at ``batch_size`` and `MOLECULE_FIELDS`; for other data, epochs from
    ``steps`` (`TRANSFER_STEPS`) at ``batch_size`` and a warmup of `WARMUP_SHARE` of them."""
    molecules = isinstance(source, MoleculeSource)
    steps_per_epoch = max(1, math.ceil(train_samples / batch_size))
    low, high = MOLECULE_EPOCHS if molecules else TRANSFER_EPOCHS
    budget = steps or (MOLECULE_STEPS if molecules else TRANSFER_STEPS)
    epochs = min(high, max(low, math.ceil(budget / steps_per_epoch)))
    if molecules:
        return {"epochs": epochs, **MOLECULE_FIELDS}
    return {"epochs": epochs, "warmup_epochs": round(WARMUP_SHARE * epochs, 3)}


def with_data_defaults(
    config: TrainConfig, source: DataSource, train_set: Dataset, given: Collection[str]
) -> tuple[TrainConfig, str | None]:
    """``config`` with the data's defaults (`data_defaults`, and for data other than molecules
    `transfer_batch_size`) for the fields not in ``given``, and a line saying what they are
    (None when the caller set them all, or the data has no length). A warmup the user's own
    ``epochs`` would not reach is shortened to a tenth of them."""
    if not hasattr(train_set, "__len__"):  # streamed shards: the epoch's length is not known
        return config, None
    train_samples = len(train_set)  # type: ignore[arg-type]
    molecules = isinstance(source, MoleculeSource)
    chosen: dict[str, Any] = {}
    if not molecules and "batch_size" not in given:
        chosen["batch_size"] = transfer_batch_size(train_samples)
    batch_size = chosen.get("batch_size", config.batch_size)
    chosen |= {k: v for k, v in data_defaults(source, train_samples, batch_size).items() if k not in given}
    if not chosen:
        return config, None
    epochs = chosen.get("epochs", config.epochs)
    if "warmup_epochs" in chosen and chosen["warmup_epochs"] >= epochs / 5:
        chosen["warmup_epochs"] = epochs / 10
    config = dataclasses.replace(config, **chosen)
    shown = ", ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in chosen.items())
    what = "molecules" if molecules else source.kind
    unit = "graphs" if molecules else "samples"
    return config, f"defaults for {what} ({train_samples} training {unit}; a flag overrides each): {shown}"
