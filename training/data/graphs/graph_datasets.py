"""PyG datasets of graphs as a `DataSource` (graph classification), batched by PyG's collater."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from zoo.errors import DataError
from zoo.training.data.source import DataSource, class_counts


def graph_source(dataset: Any) -> DataSource:
    """A PyG dataset of graphs, batched by PyG's collater (one `Batch` per step)."""
    from torch_geometric.loader.dataloader import Collater

    if len(dataset) < 2:
        raise DataError(
            f"{type(dataset).__name__} holds {len(dataset)} graph(s); training splits a dataset of many graphs "
            "(graph classification), not the nodes of one graph"
        )
    num_classes = int(dataset.num_classes)
    class_names = [str(i) for i in range(num_classes)]
    labels = _graph_labels(dataset, num_classes)

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return dataset.index_select(list(indices))

    return DataSource(
        kind="graphs",
        description=f"{type(dataset).__name__} ({len(dataset)} graphs, {num_classes} classes)",
        num_samples=len(dataset),
        num_classes=num_classes,
        class_names=class_names,
        make_subset=make_subset,
        in_chans=int(dataset.num_features),  # node features
        collate_fn=Collater(dataset),
        class_counts=class_counts(labels, class_names) if labels is not None else None,
        labels=labels,
    )


def _graph_labels(dataset: Any, num_classes: int) -> torch.Tensor | None:
    """One class index per graph when the dataset holds them in memory (``dataset.y``);
    None for regression targets, node labels, or datasets read lazily."""
    try:
        y = dataset.y
    except Exception:
        return None
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.ndim != 1 or len(y) != len(dataset):
        return None
    y = y.long()
    if len(y) == 0 or int(y.min()) < 0 or int(y.max()) >= num_classes:
        return None
    return y
