"""What every epoch of a `zoo.training.loop.trainer.Trainer.fit` reads: `Epochs`, the loader over
this process's shard of the training set (reshuffled each epoch, its workers seeded by the
epoch), and the run's budget of optimizer steps, planned by `plan_epochs`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from zoo.training.loop.loaders import EpochSampler
from zoo.training.loop.train_config import TrainConfig


@dataclass
class Epochs:
    """What every epoch of a `fit` reads (the loader, its sampler and the seed of its workers'
    generator) and the run's budget of optimizer steps."""

    loader: DataLoader
    sampler: EpochSampler
    generator: torch.Generator
    steps_per_epoch: int
    total_steps: int


def plan_epochs(
    train_set: Dataset,
    cfg: TrainConfig,
    world_size: int,
    rank: int,
    make_loader: Callable[..., DataLoader],
) -> Epochs:
    """The loader every epoch of a `fit` reads (this process's shard, reshuffled each epoch;
    ``make_loader(dataset, sampler, generator, **options)`` builds it) and the run's budget of
    optimizer steps (``max_steps``, else ``epochs`` of ``accum_steps`` micro-batches each)."""
    sampler = EpochSampler(train_set, num_replicas=world_size, rank=rank, seed=cfg.seed)
    # a last batch under a quarter of the others is dropped (BatchNorm needs >1 sample, and a tiny one
    # is noise); a larger one is kept: dropping it lost 6-36% of a small data set's samples per epoch
    remainder = len(sampler) % cfg.batch_size
    drop_last = len(sampler) >= cfg.batch_size and 0 < remainder < max(2, cfg.batch_size // 4)
    generator = torch.Generator()
    options: dict[str, Any] = {"persistent_workers": cfg.persistent_workers, "drop_last": drop_last}
    loader = make_loader(train_set, sampler, generator, **options)
    steps_per_epoch = math.ceil(len(loader) / cfg.accum_steps)
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    return Epochs(loader, sampler, generator, steps_per_epoch, total_steps)
