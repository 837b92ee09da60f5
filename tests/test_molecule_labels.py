"""Molecule files with missing labels, as public property sets ship them (Tox21-like blanks,
``NA`` from R or a spreadsheet, ``nan`` from pandas, a JSON ``null``, an SDF field on some
records only): each is refused by line with the fix, or with ``--skip-bad-rows`` skipped and
counted; a missing-value marker among numbers never turns a regression into classes."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("rdkit")

from zoo.cli import main  # noqa: E402
from zoo.errors import DataError  # noqa: E402
from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source  # noqa: E402

RDKIT = Path(__import__("rdkit").__file__).parent
ROWS = [
    tuple(line.rsplit(",", 1))
    for line in (RDKIT / "Data" / "NCI" / "first_5k.tpsa.csv").read_text().splitlines()[1:40]
    if line.strip() and not line.startswith("#")
][:30]
MISSING = {3: "NA", 7: "", 11: "nan", 15: "N/A", 19: "null"}  # row index -> how the table spells it


def _table(path: Path, labels: dict[int, str]) -> Path:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["smiles", "tpsa"])
        writer.writerows((smiles, labels.get(i, value)) for i, (smiles, value) in enumerate(ROWS))
    return path


def test_missing_labels_among_numbers_are_refused_by_line_or_skipped(tmp_path: Path) -> None:
    path = _table(tmp_path / "tpsa.csv", MISSING)
    with pytest.raises(DataError, match=r"tpsa.csv, line 5: the label is missing \('NA'\).*--skip-bad-rows"):
        molecule_source(path)
    with pytest.warns(UserWarning, match=r"skipped 5 rows without a label \(lines 5, 9, 13, 17, 21\)"):
        source = molecule_source(path, MoleculeOptions(skip_bad_rows=True))
    assert source.num_classes == 1 and source.target is not None  # a regression, not one class per value
    assert source.num_samples == 25 and source.skipped == 5 and "5 skipped" in source.description
    rows = _table(tmp_path / "bad.csv", MISSING).read_text().replace(ROWS[0][0], "C1CC(", 1).replace(ROWS[0][1], "oops")
    (tmp_path / "bad.csv").write_text(rows)  # an unreadable molecule's label does not decide the task
    with pytest.warns(UserWarning):
        assert molecule_source(tmp_path / "bad.csv", MoleculeOptions(skip_bad_rows=True)).target is not None
    with pytest.warns(UserWarning, match="without a label"):  # --task regression reads them the same way
        assert molecule_source(path, MoleculeOptions(task="regression", skip_bad_rows=True)).num_samples == 25


def test_among_class_names_only_an_empty_label_is_missing(tmp_path: Path) -> None:
    """``NA`` among class names is a class (a toxicity grade may be called that); an empty cell is no label."""
    classes = {i: ("NA" if i % 3 == 0 else "low" if i % 3 == 1 else "high") for i in range(len(ROWS))}
    source = molecule_source(_table(tmp_path / "grades.csv", classes))
    assert source.class_names == ["NA", "high", "low"]
    with pytest.raises(DataError, match=r"line 2: the label is missing \(''\)"):
        molecule_source(_table(tmp_path / "blank.csv", classes | {0: ""}))


def test_a_json_null_and_an_sdf_field_on_some_records_are_missing_labels(tmp_path: Path) -> None:
    from rdkit import Chem

    jsonl = tmp_path / "mols.jsonl"
    jsonl.write_text("".join(json.dumps({"smiles": s, "y": None if i == 4 else float(v)}) + "\n" for i, (s, v) in
                             enumerate(ROWS)))  # fmt: skip
    with pytest.raises(DataError, match=r"mols.jsonl, line 5: the label is missing"):
        molecule_source(jsonl)
    sdf = tmp_path / "mols.sdf"
    with Chem.SDWriter(str(sdf)) as writer:
        for i, (smiles, value) in enumerate(ROWS):
            mol = Chem.MolFromSmiles(smiles)
            if i % 2 == 0:
                mol.SetProp("pIC50", value)
            writer.write(mol)
    with pytest.warns(UserWarning, match="skipped 15 rows without a label"):
        assert molecule_source(sdf, MoleculeOptions(label_field="pIC50", skip_bad_rows=True)).num_samples == 15
    with pytest.raises(DataError, match=r"no field 'pic_50' \(--label-field\); its fields are \['pIC50'\]"):
        molecule_source(sdf, MoleculeOptions(label_field="pic_50"))


def test_the_command_line_says_the_missing_label_in_one_line(tmp_path: Path, capsys) -> None:
    path = _table(tmp_path / "tpsa.csv", MISSING)
    code = main(["finetune", "gin3", "--data", str(path), "--out", str(tmp_path / "run"), "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "line 5: the label is missing ('NA')" in err
    assert not (tmp_path / "run").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["finetune", "gin3", "--data", str(path), "--out", str(tmp_path / "run"), "--epochs", "1",
                     "--skip-bad-rows", "--no-progress"]) == 0  # fmt: skip
    assert "25 molecules, 5 skipped" in (tmp_path / "run" / "README.md").read_text()


def test_a_smiles_column_of_another_name_is_read_by_smiles_field(tmp_path: Path, capsys) -> None:
    """BACE ships its SMILES in a column named mol: --smiles-field names it for zoo finetune and zoo eval
    (chemprop's --smiles-columns); without it the one-line error names the flag."""
    path = tmp_path / "bace.csv"
    with open(path, "w", newline="") as file:
        csv.writer(file).writerows([("CID", "mol", "pIC50"), *((f"c{i}", s, v) for i, (s, v) in enumerate(ROWS))])
    run = ["finetune", "gin3", "--data", str(path), "--out", str(tmp_path / "run"), "--epochs", "1", "--no-progress"]
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "['CID', 'mol', 'pIC50']" in err and "--smiles-field NAME" in err and len(err.strip().splitlines()) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*run, "--smiles-field", "MOL", "--label-field", "pIC50"]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--data", str(path), "--smiles-field", "mol", "--no-progress"]) == 0
    assert "rmse" in capsys.readouterr().out
    with pytest.raises(DataError, match=r"--label-field and --smiles-field both name 'mol': name two"):
        molecule_source(path, MoleculeOptions(smiles_field="mol", label_field="MOL"))
    with pytest.raises(DataError, match=r"no smi column in the header 'CID', 'mol', 'pIC50'; check --smiles-field smi"):
        molecule_source(path, MoleculeOptions(smiles_field="smi", label_field="pIC50"))
    jsonl = tmp_path / "mols.jsonl"
    jsonl.write_text("".join(json.dumps({"Drug": s, "Y": float(v)}) + "\n" for s, v in ROWS))  # TDC's names
    assert molecule_source(jsonl, MoleculeOptions(smiles_field="drug")).num_samples == len(ROWS)
    with pytest.raises(DataError, match=r"line 1: no 'smiles' string.*--smiles-field NAME"):
        molecule_source(jsonl)


def test_validation_classes_that_differ_are_said_briefly_with_the_file(tmp_path: Path, capsys) -> None:
    names = {i: "ab"[i % 2] for i in range(len(ROWS))}
    train, val = _table(tmp_path / "train.csv", names), _table(tmp_path / "val.csv", names | {0: "c"})
    run = ["finetune", "gin3", "--data", str(train), "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*run, "--val-data", str(val)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--val-data {val}: its labels are 3 classes ('a', 'b', 'c'), the training data's 2 classes "
                        "('a', 'b'); give both files the same classes (or both numbers)")  # fmt: skip
    many = _table(tmp_path / "many.csv", {i: f"class{i}" for i in range(len(ROWS))})
    assert main([*run, "--val-data", str(many)]) == 2
    err = capsys.readouterr().err
    assert "30 classes ('class0'," in err and "more), the training" in err and len(err) < 400


def test_whole_number_classes_written_two_ways_are_one_class(tmp_path: Path) -> None:
    """BBBP-like 0/1 labels where part of the column went through floats (0 and 0.0): two classes, not four."""
    source = molecule_source(
        _table(tmp_path / "bbbp.csv", {i: ("0", "1", "0.0", "1.0")[i % 4] for i in range(len(ROWS))}),
        MoleculeOptions(task="classification"),
    )
    assert source.class_names == ["0", "1"] and source.class_counts == {"0": 15, "1": 15}
    floats = {i: ("0.0", "1.0")[i % 2] for i in range(len(ROWS))}  # one spelling: the names a run trained before has
    assert molecule_source(_table(tmp_path / "f.csv", floats), MoleculeOptions(task="classification")).class_names == [
        "0.0", "1.0"]  # fmt: skip
    missing = floats | {4: "NA", 6: "nan"}  # --task classification, as the 0/1 warning advises: markers still missing
    with pytest.warns(UserWarning, match="skipped 2 rows without a label"):
        source = molecule_source(_table(tmp_path / "m.csv", missing), MoleculeOptions(task="classification",
                                                                                      skip_bad_rows=True))  # fmt: skip
    assert source.class_names == ["0.0", "1.0"]


def test_a_jsonl_without_the_named_smiles_key_names_the_flag_given(tmp_path: Path) -> None:
    jsonl = tmp_path / "mols.jsonl"
    jsonl.write_text("".join(json.dumps({"Drug": s, "Y": float(v)}) + "\n" for s, v in ROWS))
    with pytest.raises(DataError, match=r"no 'mol' string; found the keys 'Drug', 'Y'; check --smiles-field mol$"):
        molecule_source(jsonl, MoleculeOptions(smiles_field="mol"))
