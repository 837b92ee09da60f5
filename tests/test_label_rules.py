"""One label rule across readers (issue 50): every reader of labelled rows (text rows in CSV and
JSONL, molecules in CSV, JSONL and SDF) refuses the same bad labels (NaN, infinities, and for
regression targets numbers past float32) with a `DataError` naming the file and the line of the
first bad one, wherever it is. Property-based: hypothesis picks the bad labels and their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zoo.errors import DataError
from zoo.training.data.kinds import open_data

MISSING = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e999"]  # no value, for any task
PAST_FLOAT32 = ["1e308", "-4e38"]  # numbers, but no regression target training can hold
SMILES = ["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC(=O)O", "CCCC", "CCOC", "CN", "CO", "OCCO", "CCCN"]
ROWS = len(SMILES)


def _text(path: Path, labels: list[str]) -> dict[int, int]:
    """Text rows of ``labels``; the line of each row."""
    if path.suffix == ".csv":
        path.write_text("text,label\n" + "".join(f"row {i},{y}\n" for i, y in enumerate(labels)))
        return {i: i + 2 for i in range(len(labels))}
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": y}) + "\n" for i, y in enumerate(labels)))
    return {i: i + 1 for i in range(len(labels))}


def _molecules(path: Path, labels: list[str]) -> dict[int, int]:
    """Molecules of ``labels`` (a CSV, JSONL or SDF file); the line each record starts on."""
    if path.suffix == ".csv":
        path.write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y in zip(SMILES, labels)))
        return {i: i + 2 for i in range(len(labels))}
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"smiles": s, "y": y}) + "\n" for s, y in zip(SMILES, labels)))
        return {i: i + 1 for i in range(len(labels))}
    from rdkit import Chem

    blocks, starts, line = [], {}, 1
    for i, (smiles, label) in enumerate(zip(SMILES, labels)):
        block = Chem.MolToMolBlock(Chem.MolFromSmiles(smiles)) + f">  <y>\n{label}\n\n$$$$\n"
        starts[i], line = line, line + block.count("\n")
        blocks.append(block)
    path.write_text("".join(blocks))
    return starts


def _labels(good: list[str], bad: dict[int, str]) -> list[str]:
    return [bad.get(i, label) for i, label in enumerate(good)]


bad_rows = st.dictionaries(st.integers(0, ROWS - 1), st.sampled_from(MISSING), min_size=1, max_size=3)


@given(suffix=st.sampled_from([".csv", ".jsonl"]), bad=bad_rows, numeric=st.booleans())
def test_text_rows_refuse_missing_labels_by_the_first_line(tmp_path_factory, suffix: str, bad: dict, numeric: bool):
    path = tmp_path_factory.mktemp("text") / f"t{suffix}"
    good = [str(i % 2) if numeric else "ab"[i % 2] for i in range(ROWS)]
    lines = _text(path, _labels(good, bad))
    first = min(bad)
    with pytest.raises(DataError, match=rf"t\{suffix}, line {lines[first]}: the label '{bad[first]}'"):
        open_data(path)


@given(
    suffix=st.sampled_from([".csv", ".jsonl", ".sdf"]),
    bad=st.dictionaries(st.integers(0, ROWS - 1), st.sampled_from(MISSING + PAST_FLOAT32), min_size=1, max_size=3),
)
def test_molecule_files_refuse_unusable_targets_by_the_first_line(tmp_path_factory, suffix: str, bad: dict):
    pytest.importorskip("rdkit")
    from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source

    path = tmp_path_factory.mktemp("mol") / f"m{suffix}"
    lines = _molecules(path, _labels([str(0.5 * i) for i in range(ROWS)], bad))
    first = min(bad)
    options = MoleculeOptions(label_field="y") if suffix == ".sdf" else None
    with pytest.raises(DataError, match=rf"m\{suffix}, line {lines[first]}: the label '{bad[first]}'"):
        molecule_source(path, options)
