"""The samplers and loaders the Trainer reads datasets with: one seeded order per epoch, split
across processes (`EpochSampler`, `ShardSampler`), and `build_loader`'s DataLoader options
(streams of shards read the samplers' epoch, rank and position themselves)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler


class EpochSampler(DistributedSampler):
    """`DistributedSampler` (a fixed-seed shuffle per epoch, one shard per process) that can
    start ``skip`` samples into its shard, so a resumed run reads exactly the rest of the
    interrupted epoch. Works without a process group (num_replicas=1, rank=0)."""

    def __init__(
        self, dataset: Dataset, num_replicas: int = 1, rank: int = 0, shuffle: bool = True, seed: int = 0
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return self.num_samples - self.skip


class ShardSampler(Sampler[int]):
    """Evaluation shard of one process: every ``num_replicas``-th sample in order, padded
    (repeating its last sample) so every process runs the same number of batches; the first
    ``num_valid`` indices are the real ones."""

    def __init__(self, dataset: Dataset, num_replicas: int = 1, rank: int = 0) -> None:
        size = len(dataset)
        self.num_replicas, self.rank = num_replicas, rank
        self.indices = list(range(rank, size, num_replicas))
        self.num_valid = len(self.indices)
        padded = -(-size // num_replicas)
        if self.indices and len(self.indices) < padded:
            self.indices += [self.indices[-1]] * (padded - len(self.indices))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    sampler: Sampler[int] | None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> DataLoader:
    """A DataLoader with worker options that only apply when there are workers; pass a
    ``generator`` so the workers' seeds come from it rather than the global RNG. A stream
    (`zoo.training.data.shards.shard_source.ShardStream`) takes no sampler: it is bound to ``sampler``'s
    epoch, rank and position instead, read when each epoch's iteration starts (so its workers
    are never persistent)."""
    bind = getattr(dataset, "bind_sampler", None)
    if bind is not None:
        dataset, sampler, persistent_workers = bind(sampler, batch_size), None, False
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=4 if num_workers > 0 else None,
        generator=generator,
        drop_last=drop_last,
    )
