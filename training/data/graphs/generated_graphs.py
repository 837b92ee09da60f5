"""Graph datasets for the graph models (architectures/graph.py), deterministic given a seed:
triangle counting (Chen et al., 2020), house vs 5-cycle motif classification (BA-2Motifs'
construction), Fashion-MNIST images as pixel graphs, all offline; and PyG's ``TUDataset``
(MUTAG, PROTEINS, NCI1...), which downloads once.

The synthetic sets are PyG ``InMemoryDataset``s built in memory (no root folder), so they work
with ``torch_geometric.loader.DataLoader``, ``transform=`` and ``pre_transform=`` (applied once,
e.g. ``pre_transform=AddTriangles()`` for the triangle readout) as any PyG dataset does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import networkx as nx
import numpy as np
import torch
from torch import Tensor

# before PyG: zoo.architectures.graph imports PyG with its import-time FutureWarning silenced
from zoo.architectures.graph import AddTriangles

# isort: split
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.datasets import ExplainerDataset, TUDataset
from torch_geometric.datasets.graph_generator import BAGraph
from torch_geometric.datasets.motif_generator import CycleMotif, HouseMotif
from torch_geometric.transforms import Compose, Constant
from torch_geometric.utils import grid, remove_self_loops, to_undirected

from zoo.errors import InvalidArgumentError
from zoo.store.download import zoo_home
from zoo.training.data.builtin import load_fashion_mnist

Split = Literal["train", "val", "test"]
Transform = Callable[[Data], Data] | None

# Chen et al. (2020), sec. 6: ER(10, 0.3); random regular (n, d) drawn from these pairs, then n
# random edges deleted; 30% / 20% / 50% train / val / test.
CHEN_REGULAR_SIZES = ((10, 6), (15, 6), (20, 5), (30, 5))
CHEN_SPLIT = (0.3, 0.2, 0.5)


def _split_slice(num: int, fractions: Sequence[float], split: Split) -> slice:
    """The contiguous part of ``range(num)`` that ``split`` takes, in train/val/test order."""
    if split not in ("train", "val", "test"):
        raise InvalidArgumentError(f"split must be 'train', 'val' or 'test', got {split!r}")
    ends = np.round(np.cumsum(fractions) / np.sum(fractions) * num).astype(int)
    start = {"train": 0, "val": ends[0], "test": ends[1]}[split]
    return slice(int(start), int(ends[{"train": 0, "val": 1, "test": 2}[split]]))


class _GeneratedDataset(InMemoryDataset):
    """An in-memory dataset from a list of graphs, ``pre_transform`` applied once."""

    def __init__(self, data_list: list[Data], transform: Transform, pre_transform: Transform) -> None:
        super().__init__(root=None, transform=transform, pre_transform=pre_transform)
        if isinstance(pre_transform, AddTriangles):
            data_list = pre_transform.many(data_list)
        elif pre_transform is not None:
            data_list = [pre_transform(d) for d in data_list]
        self.data, self.slices = self.collate(data_list)


def _from_networkx(graph: nx.Graph, y: Tensor) -> Data:
    """A featureless graph (x = ones) with both directions of each edge; much faster than
    PyG's from_networkx, which copies every attribute dict."""
    edges = torch.tensor(list(graph.edges()), dtype=torch.long).reshape(-1, 2).t()
    n = graph.number_of_nodes()
    return Data(x=torch.ones(n, 1), edge_index=to_undirected(edges, num_nodes=n), y=y, num_nodes=n)


class TriangleCounting(_GeneratedDataset):
    """Triangle counting on random graphs without node features (x = ones [n, 1]) as in
    Chen et al. (2020): ``kind="er"``, Erdős–Rényi G(10, 0.3); ``kind="regular"``, random
    regular graphs with (n, d) drawn from {(10, 6), (15, 6), (20, 5), (30, 5)}, then n random
    edges deleted. ``y`` [1, 1] is the number of triangles; the metric is the test MSE divided
    by the variance of the test labels (``normalized_mse``). All ``num_graphs`` graphs come from
    one seeded generator, then ``split`` takes its 30 / 20 / 50% part, so splits never overlap.
    """

    def __init__(
        self,
        kind: Literal["er", "regular"] = "er",
        split: Split = "train",
        num_graphs: int = 5000,
        seed: int = 0,
        transform: Transform = None,
        pre_transform: Transform = None,
    ) -> None:
        if kind not in ("er", "regular"):
            raise InvalidArgumentError(f"kind must be 'er' or 'regular', got {kind!r}")
        rng = np.random.default_rng(seed)
        graphs = []
        for _ in range(num_graphs):
            if kind == "er":
                graph = nx.gnp_random_graph(10, 0.3, seed=int(rng.integers(2**32)))
            else:
                n, d = CHEN_REGULAR_SIZES[rng.integers(len(CHEN_REGULAR_SIZES))]
                graph = nx.random_regular_graph(d, n, seed=int(rng.integers(2**32)))
                edges = list(graph.edges())
                graph.remove_edges_from(edges[i] for i in rng.choice(len(edges), size=n, replace=False))
            graphs.append(graph)
        graphs = graphs[_split_slice(num_graphs, CHEN_SPLIT, split)]
        counts = [sum(nx.triangles(g).values()) // 3 for g in graphs]
        data_list = [_from_networkx(g, torch.tensor([[float(c)]])) for g, c in zip(graphs, counts)]
        super().__init__(data_list, transform, pre_transform)


class MotifClassification(_GeneratedDataset):
    """House (label 0) vs 5-cycle (label 1) attached by one edge to a Barabási–Albert graph:
    the construction of BA-2Motifs (Luo et al., 2020), made offline with PyG's
    ``ExplainerDataset``. x = ones [n, 1]. ``num_graphs`` graphs, half of each class, shuffled
    with ``seed``; ``split`` takes its 80 / 10 / 10% part."""

    def __init__(
        self,
        split: Split = "train",
        num_graphs: int = 1000,
        num_nodes: int = 20,
        num_edges: int = 1,
        seed: int = 0,
        transform: Transform = None,
        pre_transform: Transform = None,
    ) -> None:
        with torch.random.fork_rng():  # ExplainerDataset draws from torch's global generator
            torch.manual_seed(seed)
            data_list = []
            for label, motif in enumerate((HouseMotif(), CycleMotif(5))):
                count = num_graphs // 2 + (label == 0) * (num_graphs % 2)
                explained = ExplainerDataset(BAGraph(num_nodes, num_edges), motif, num_motifs=1, num_graphs=count)
                for graph in explained:
                    n = graph.num_nodes
                    y = torch.tensor([label])
                    data_list.append(Data(x=torch.ones(n, 1), edge_index=graph.edge_index, y=y, num_nodes=n))
            order = torch.randperm(len(data_list)).tolist()
        data_list = [data_list[i] for i in order][_split_slice(len(order), (0.8, 0.1, 0.1), split)]
        super().__init__(data_list, transform, pre_transform)


class FashionMNISTGraphs(_GeneratedDataset):
    """Fashion-MNIST images (the real ones, ``zoo.training.data.builtin.load_fashion_mnist``) as pixel
    graphs: the image is average-pooled to ``size`` x ``size`` (28 % size == 0), each pixel
    brighter than ``threshold`` (in [0, 1]) becomes a node with x = [intensity, row / size,
    col / size], joined to its bright 8-neighbours (diagonals give triangles); ``pos`` holds
    (row, col). ``split`` is the official train or test split ("val" is not defined here);
    ``num_graphs`` draws that many images at random with ``seed`` (None: all), or takes the
    first ``num_graphs`` when ``seed`` is None."""

    def __init__(
        self,
        split: Literal["train", "test"] = "train",
        num_graphs: int | None = None,
        size: int = 14,
        threshold: float = 0.1,
        seed: int | None = 0,
        root: str | Path | None = None,
        transform: Transform = None,
        pre_transform: Transform = None,
    ) -> None:
        if size < 1 or 28 % size:
            raise InvalidArgumentError(f"size must divide 28 (e.g. 28, 14, 7), got {size}")
        images, labels = load_fashion_mnist(split, root)
        if num_graphs is not None:
            order = (
                torch.arange(len(images))
                if seed is None
                else torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))
            )
            images, labels = images[order[:num_graphs]], labels[order[:num_graphs]]
        pooled = torch.nn.functional.avg_pool2d(images.unsqueeze(1).float() / 255, 28 // size).flatten(1)
        src, dst = remove_self_loops(grid(size, size)[0])[0]
        keep = pooled > threshold  # [images, pixels]: the nodes
        node_id = keep.cumsum(1) - 1  # each kept pixel's node number in its graph
        image, edge = (keep[:, src] & keep[:, dst]).nonzero(as_tuple=True)  # grid edges between kept pixels
        edges = torch.stack([node_id[image, src[edge]], node_id[image, dst[edge]]])
        image_of_node, pixel = keep.nonzero(as_tuple=True)
        pos = torch.stack([pixel // size, pixel % size], dim=1).float()
        x = torch.cat([pooled[image_of_node, pixel].unsqueeze(1), pos / size], dim=1)
        nodes, edge_counts = keep.sum(1).tolist(), torch.bincount(image, minlength=len(keep)).tolist()
        data_list = [
            Data(x=x_i, edge_index=e_i, y=label.view(1), pos=pos_i, num_nodes=n)
            for x_i, pos_i, e_i, label, n in zip(
                x.split(nodes), pos.split(nodes), edges.split(edge_counts, dim=1), labels, nodes
            )
        ]
        super().__init__(data_list, transform, pre_transform)


def load_tu_dataset(
    name: str,
    root: str | Path | None = None,
    transform: Transform = None,
    pre_transform: Transform = None,
    **kwargs,
) -> TUDataset:
    """PyG's ``TUDataset`` (MUTAG, PROTEINS, NCI1, ...) under ``root`` (default
    ``$ZOO_HOME/datasets/TUDataset``), downloaded on first use; the raw files in
    ``root/name/raw`` are used when present. Graphs without node features get x = ones [n, 1]
    so every zoo graph model can read them. ``kwargs`` go to TUDataset (``use_node_attr``...)."""
    root = Path(root) if root is not None else zoo_home() / "datasets" / "TUDataset"
    dataset = TUDataset(str(root), name, transform=transform, pre_transform=pre_transform, **kwargs)
    if dataset.num_node_features == 0:
        dataset.transform = Constant() if transform is None else Compose([Constant(), transform])
    return dataset


def random_split(
    dataset: InMemoryDataset, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> tuple[InMemoryDataset, InMemoryDataset, InMemoryDataset]:
    """Train / val / test subsets of ``dataset`` in the given proportions, shuffled with ``seed``."""
    if len(fractions) != 3 or min(fractions) < 0 or sum(fractions) <= 0:
        raise InvalidArgumentError(f"fractions must be three non-negative numbers (train, val, test), got {fractions}")
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))
    return tuple(dataset[order[_split_slice(len(dataset), fractions, s)]] for s in ("train", "val", "test"))


def normalized_mse(prediction: Tensor, target: Tensor) -> float:
    """Mean squared error divided by the variance of ``target``: Chen et al.'s counting metric
    (1 is what predicting the mean count scores)."""
    target = target.reshape(prediction.shape).to(prediction.dtype)
    return float(((prediction - target) ** 2).mean() / target.var(unbiased=False))
