"""Training defaults that depend on the data: what `finetune` uses for the `TrainConfig` fields
a user did not set. Molecules train from scratch on a few hundred to a few thousand graphs,
where the general defaults (10 epochs, no warmup) stop long before the validation loss does:
they get a budget of optimizer steps spread over as many epochs as the data set's size needs,
a warmup and gradient clipping, and no early stopping: the cosine schedule runs to its end and
the best epoch on validation is kept (stopping after 20 epochs without a better validation loss
cut TPSA's runs while the rate was still high). The values were chosen on the validation splits
of the molecule sets (docs/families/graph.md), never on their test splits."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from typing import Any

from torch.utils.data import Dataset

from zoo.training.data.kinds import DataSource
from zoo.training.data.molecules.molecule_files import MoleculeSource
from zoo.training.loop.train_config import TrainConfig

# Molecules: about this many optimizer steps, in MOLECULE_EPOCHS epochs at the least and most.
MOLECULE_STEPS = 3000
MOLECULE_EPOCHS = (30, 150)
MOLECULE_FIELDS: dict[str, Any] = {"lr": 1e-3, "weight_decay": 1e-4, "warmup_epochs": 2.0, "clip_grad_norm": 5.0}


def data_defaults(source: DataSource, train_samples: int, batch_size: int, steps: int | None = None) -> dict[str, Any]:
    """The TrainConfig fields the data chooses ({} for data without its own defaults): for
    molecules, epochs from ``steps`` (`MOLECULE_STEPS`) at ``batch_size``, and `MOLECULE_FIELDS`."""
    if not isinstance(source, MoleculeSource):
        return {}
    steps_per_epoch = max(1, math.ceil(train_samples / batch_size))
    low, high = MOLECULE_EPOCHS
    epochs = min(high, max(low, math.ceil((steps or MOLECULE_STEPS) / steps_per_epoch)))
    return {"epochs": epochs, **MOLECULE_FIELDS}


def with_data_defaults(
    config: TrainConfig, source: DataSource, train_set: Dataset, given: Collection[str]
) -> tuple[TrainConfig, str | None]:
    """``config`` with the data's defaults (`data_defaults`) for the fields not in ``given``, and
    a line saying what they are (None when the data has none or the caller set them all). A
    warmup the user's own ``epochs`` would not reach is shortened to a tenth of them."""
    if not isinstance(source, MoleculeSource):  # the only data with defaults of its own (and a length)
        return config, None
    train_samples = len(train_set)  # type: ignore[arg-type]
    chosen = {k: v for k, v in data_defaults(source, train_samples, config.batch_size).items()
              if k not in given}  # fmt: skip
    if not chosen:
        return config, None
    epochs = chosen.get("epochs", config.epochs)
    if "warmup_epochs" in chosen and chosen["warmup_epochs"] >= epochs / 5:
        chosen["warmup_epochs"] = epochs / 10
    config = dataclasses.replace(config, **chosen)
    shown = ", ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in chosen.items())
    return config, f"defaults for molecules ({train_samples} training graphs; a flag overrides each): {shown}"
