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
# numbers, but past `MAX_TARGET` (1e150): no regression target float64 metrics hold
PAST_MAX_TARGET = ["1e308", "-4e200"]
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
    bad=st.dictionaries(st.integers(0, ROWS - 1), st.sampled_from(MISSING + PAST_MAX_TARGET), min_size=1, max_size=3),
)
def test_molecule_files_refuse_unusable_targets_by_the_first_line(tmp_path_factory, suffix: str, bad: dict):
    pytest.importorskip("rdkit")
    from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source

    path = tmp_path_factory.mktemp("mol") / f"m{suffix}"
    lines = _molecules(path, _labels([str(0.5 * i) for i in range(ROWS)], bad))
    first = min(bad)
    options = MoleculeOptions(label_field="y") if suffix == ".sdf" else None
    # NaN among numbers is a missing value there ("the label is missing ('nan')"), the others bad numbers
    with pytest.raises(DataError, match=rf"m\{suffix}, line {lines[first]}: the label (is missing \()?'{bad[first]}'"):
        molecule_source(path, options)


def _conflict_warnings(record: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in record if "listed again with another label" in str(w.message)]


def test_the_same_text_listed_twice_with_two_labels_is_warned_once_by_both_lines(tmp_path: Path) -> None:
    """Every reader: an input listed again with another label is one warning naming both lines,
    both labels and how many such conflicts; an input listed again with its own label is not."""
    path = tmp_path / "t.csv"
    path.write_text(
        "text,label\nfine day,good\nawful day,bad\nfine day,bad\nok day,good\nok day,good\nawful day,good\n"
    )
    with pytest.warns(UserWarning) as record:
        open_data(path)
    (message,) = _conflict_warnings(record)
    assert message == (
        f"{path}: the text 'fine day' is on line 2 labelled 'good' and on line 4 labelled 'bad' (2 inputs listed "
        "again with another label): the model trains on both (a class: fix the label or drop a row; replicates of "
        "a measured value: their mean is what it learns)"
    )


def test_an_image_listed_twice_with_two_labels_is_warned(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "img").mkdir()
    for i in range(4):
        Image.new("L", (8, 8), 40 * i).save(tmp_path / "img" / f"{i}.png")
    rows = "img/0.png,cat\nimg/1.png,dog\nimg/2.png,cat\nimg/3.png,dog\n./img/0.png,dog\n"
    (tmp_path / "metadata.csv").write_text("file_name,label\n" + rows)
    with pytest.warns(UserWarning) as record:
        open_data(tmp_path)
    (message,) = _conflict_warnings(record)
    assert "line 2 labelled 'cat' and on line 6 labelled 'dog'" in message and "(1 input listed again" in message, (
        message
    )


def test_a_molecule_listed_twice_with_two_labels_is_warned_by_its_canonical_smiles(tmp_path: Path) -> None:
    pytest.importorskip("rdkit")
    from zoo.training.data.molecules.molecule_files import molecule_source

    path = tmp_path / "m.csv"
    path.write_text("smiles,y\nCCO,active\nCCN,inactive\nCCC,active\nOCC,inactive\nCCN,inactive\n")
    with pytest.warns(UserWarning) as record:
        molecule_source(path)
    (message,) = _conflict_warnings(record)
    assert "molecule 'CCO' is on line 2 labelled 'active' and on line 5 labelled 'inactive'" in message, message
    assert "(1 input listed again" in message, message
