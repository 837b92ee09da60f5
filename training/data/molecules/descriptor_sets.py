"""The molecule backbone's training data: molecule graphs (`molecule_graphs`, built by worker
processes and kept compact) with RDKit descriptors as targets, each standardised on the training
part (`standardisation`: clipped to its `CLIP_PERCENTILES`, then centred and scaled; a constant
one dropped), as `DescriptorGraphs`. The targets are any object with ``values`` [N, D] (NaN
where missing), ``present`` [N, D] and ``names`` (D): the recipe's cached corpus targets, or
`zoo.training.data.molecules.corpus.descriptor_targets`'s. `brics_fragments` widens a corpus
of one size range (MOSES: 250-350 Da) with the smaller molecules its own BRICS fragments are."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from zoo.errors import DataError
from zoo.loading.smiles import graph_or_problem, parse_smiles
from zoo.training.data.molecules.corpus import worker_map

CLIP_PERCENTILES = (0.5, 99.5)  # each descriptor clipped to these percentiles of the training part
GRAPH_CHUNK = 512  # molecules per task of the graph workers


@dataclasses.dataclass(frozen=True)
class Standardisation:
    """Per kept descriptor (``columns`` of the targets): values clipped to [``low``, ``high``],
    then ``(value - center) / scale``; ``constant`` names those dropped."""

    names: tuple[str, ...]
    columns: np.ndarray
    center: np.ndarray
    scale: np.ndarray
    low: np.ndarray
    high: np.ndarray
    constant: tuple[str, ...]

    def apply(self, targets: Any, rows: np.ndarray) -> torch.Tensor:
        """The standardised targets [len(rows), K], float32, NaN where missing."""
        values = targets.values[np.ix_(rows, self.columns)]
        standard = (np.clip(values, self.low, self.high) - self.center) / self.scale
        standard[~targets.present[np.ix_(rows, self.columns)]] = np.nan
        return torch.from_numpy(standard.astype(np.float32))

    def to_dict(self) -> dict[str, Any]:
        """Descriptor -> its center, scale and clip range (``descriptors.json``), and those dropped."""
        stats = zip(self.names, self.center, self.scale, self.low, self.high)
        per_name = {n: {"center": c, "scale": s, "low": lo, "high": hi} for n, c, s, lo, hi in stats}
        return {"descriptors": per_name, "constant": list(self.constant), "clip_percentiles": list(CLIP_PERCENTILES)}


def standardisation(targets: Any, rows: np.ndarray) -> Standardisation:
    """Each descriptor's statistics on the training ``rows``: clipped to its 0.5-99.5
    percentiles (a descriptor whose percentiles coincide, a rare fragment, to its full range),
    then mean and std; one with a single value there is dropped as constant."""
    kept, constant = [], []  # (column, mean, std, low, high) of those kept; names of the constant ones
    for column, name in enumerate(targets.names):
        values = targets.values[rows, column][targets.present[rows, column]]
        low, high = np.percentile(values, CLIP_PERCENTILES) if values.size else (0.0, 0.0)
        if high <= low and values.size:
            low, high = values.min(), values.max()
        if high <= low:
            constant.append(name)
            continue
        clipped = np.clip(values, low, high)
        kept.append((column, float(clipped.mean()), float(clipped.std()), float(low), float(high)))
    if not kept:
        raise DataError("every descriptor is constant on the training molecules; sample more (--molecules)")
    columns, center, scale, low, high = (np.array(part) for part in zip(*kept))
    names = tuple(targets.names[i] for i in columns)
    return Standardisation(names, columns.astype(np.int64), center, scale, low, high, tuple(constant))


def molecule_graphs(smiles: Sequence[str], processes: int = 1, progress: bool = False) -> list[Any]:
    """The graph of each SMILES (`zoo.loading.smiles`, the one featurizer), its one-hot features
    kept as uint8 (a quarter of the memory; `DescriptorGraphs` makes them float), or None where
    the featurizer refuses the molecule; ``processes`` workers share them."""
    from zoo.architectures.graph import Data  # PyG's, imported there with its TorchScript warnings quiet

    chunks = [list(smiles[i : i + GRAPH_CHUNK]) for i in range(0, len(smiles), GRAPH_CHUNK)]
    graphs: list[Any] = []
    with tqdm(total=len(smiles), unit="mol", desc="graphs", disable=not progress) as bar:
        with worker_map(min(processes, len(chunks))) as mapper:
            for part in mapper(_compact_graphs, chunks):
                graphs += [None if arrays is None else Data(**_tensors(arrays)) for arrays in part]
                bar.update(len(part))
    return graphs


def brics_fragments(smiles: Sequence[str], limit: int, processes: int = 1, progress: bool = False) -> list[str]:
    """Up to ``limit`` distinct molecules that are BRICS fragments of ``smiles`` (RDKit's
    ``BRICS.BRICSDecompose``, each broken bond's dummy atom replaced by hydrogen; canonical
    SMILES), none of them one of ``smiles``: in the order the molecules give them, so the same
    input gives the same fragments. The molecules are decomposed in chunks until ``limit`` are found."""
    if limit <= 0:
        return []
    given, found = set(smiles), dict[str, None]()  # found: an ordered set
    chunks = [list(smiles[i : i + GRAPH_CHUNK]) for i in range(0, len(smiles), GRAPH_CHUNK)]
    with tqdm(total=limit, unit="fragment", desc="BRICS fragments", disable=not progress) as bar:
        with worker_map(min(processes, len(chunks))) as mapper:
            for part in mapper(_fragments, chunks):
                before = len(found)
                for text in part:
                    if len(found) >= limit:
                        break
                    if text not in given:
                        found[text] = None
                bar.update(len(found) - before)
                if len(found) >= limit:
                    break
    return list(found)


def _fragments(smiles: list[str]) -> list[str]:
    """The capped BRICS fragments of a chunk of SMILES (canonical, in order, repeats kept); in a worker too."""
    from rdkit import Chem
    from rdkit.Chem import BRICS

    from zoo.loading.smiles import quiet_rdkit

    out: list[str] = []
    with quiet_rdkit():
        for text in smiles:
            mol = parse_smiles(text)
            for piece in sorted(BRICS.BRICSDecompose(mol)) if mol is not None else ():
                fragment = Chem.MolFromSmiles(piece)
                if fragment is None or "*" not in piece:  # unbroken: the molecule itself, not a fragment
                    continue
                for atom in fragment.GetAtoms():
                    if atom.GetAtomicNum() == 0:  # where a bond was broken: a hydrogen instead
                        atom.SetAtomicNum(1)
                        atom.SetIsotope(0)
                try:
                    out.append(Chem.MolToSmiles(Chem.RemoveHs(fragment)))
                except (ValueError, RuntimeError):  # RDKit's sanitisation errors
                    continue
    return out


def _compact_graphs(smiles: list[str]) -> list[dict[str, np.ndarray] | None]:
    """The graphs of a chunk of SMILES as NumPy arrays, features uint8 (None for a refused one);
    in a worker too. Arrays, not tensors: a tensor sent back from a worker is shared through a
    file descriptor that stays open while it lives, and 200,000 graphs run out of them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster than a pool waiting for busy cores
    try:
        graphs = [graph_or_problem(parse_smiles(text))[0] for text in smiles]
    finally:
        torch.set_num_threads(threads)
    return [
        None if graph is None else {key: _compact(key, value).numpy() for key, value in graph.items()}
        for graph in graphs
    ]


def _compact(key: str, value: torch.Tensor) -> torch.Tensor:
    return value.to(torch.uint8) if key in ("x", "edge_attr") else value


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(value) for key, value in arrays.items()}


class DescriptorGraphs(Dataset):
    """Molecule graphs with their standardised descriptors as ``y`` [1, K] (NaN where missing)."""

    def __init__(self, graphs: Sequence[Any], targets: torch.Tensor) -> None:
        self.graphs, self.targets = graphs, targets

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index: int) -> Any:
        graph = copy.copy(self.graphs[index])  # the stored graph stays compact
        graph.x, graph.edge_attr = graph.x.float(), graph.edge_attr.float()
        graph.y = self.targets[index : index + 1]
        return graph
