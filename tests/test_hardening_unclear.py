"""The fourth hardening round's remaining unclear outcomes (issue 50): each failure a user causes
is one line that names its cause (zoo's limit, the reader that wanted a column, the datatype),
the task a molecule file gets is said with its reason, and nothing warns that zoo could silence."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.errors import DataError, ZooError

pytest.importorskip("rdkit")


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# --- a SMILES over zoo's length limit ---------------------------------------------------------


def test_a_smiles_over_zoos_limit_is_named_as_zoos_limit(tmp_path: Path) -> None:
    # "RDKit cannot parse it", while RDKit parses it: zoo's length limit was the cause
    from zoo.loading.molecules import MAX_SMILES_CHARS, smiles_batch
    from zoo.training.data.molecules import molecule_source

    long = "C" * (MAX_SMILES_CHARS + 1)
    expected = "it is 2,001 characters, over zoo's limit of 2,000 characters per SMILES"
    with pytest.raises(ZooError) as caught:
        smiles_batch(["CCO", long])
    assert str(caught.value).startswith("SMILES[1] 'CCCC") and f"({expected}); check it" in str(caught.value)
    rows = [["CCO", "1.5"], ["c1ccccc1O", "2.5"], [long, "3.0"], ["CCN", "0.5"]]
    path = _csv(tmp_path / "long.csv", ["smiles", "y"], rows)
    with pytest.raises(DataError, match=rf"long\.csv, line 4: the molecule is not usable \({expected}\); fix"):
        molecule_source(path)
    with pytest.raises(ZooError, match=r"SMILES\[0\] ' ' is not a usable SMILES \(it is empty\)"):
        smiles_batch([" "])
    with pytest.raises(ZooError, match=r"\(RDKit cannot parse it\)"):
        smiles_batch(["C1CC("])


# --- zoo predict gin3.* warns nothing ---------------------------------------------------------


def test_predicting_with_a_molecule_model_prints_no_torch_jit_warning() -> None:
    # "zoo: warning: `torch.jit.script` is deprecated": PyG imported before zoo's quiet import of it
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "predict", "gin3.nci_tpsa", "CCO"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("CCO\t") and result.stderr == "", result.stderr
