"""Labels keep their spelling (issue 62): class names are the strings as written ("00" is not
class 0), one Unicode form (NFC) with a warning when two spellings became one class, and a bad
label is refused by its line."""

from __future__ import annotations

import json
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.targets import read_targets

NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


def _rows(labels: list[object]) -> list[tuple[int, object]]:
    return [(line, label) for line, label in enumerate(labels, start=2)]


def test_zero_padded_labels_are_names_as_written() -> None:
    targets = read_targets("t.csv", _rows(["00", "01", "00", "01"]), "label")
    assert targets.names == ["00", "01"] and targets.values.tolist() == [0, 1, 0, 1]
    both = read_targets("t.csv", _rows(["1", "01", "1", "01"]), "label")
    assert both.names == ["01", "1"]  # two spellings, two classes: never merged silently
    indices = read_targets("t.csv", _rows(["0", "1", "2", "1"]), "label")
    assert indices.names == ["0", "1", "2"] and indices.values.tolist() == [0, 1, 2, 1]  # indices as before


def test_nfc_and_nfd_spellings_are_one_class_with_a_warning(tmp_path: Path) -> None:
    assert NFC != NFD
    data = tmp_path / "rows.csv"
    data.write_text("text,label\n" + "".join(f"t{i},{[NFC, NFD, 'tea'][i % 3]}\n" for i in range(9)), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"rows.csv: the 'label' labels .* are one name in different Unicode forms"):
        source = open_data(data)
    assert source.class_names == [NFC, "tea"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one form only: no warning
        assert read_targets("t", _rows([NFC, "tea", NFC, "tea"]), "label").names == [NFC, "tea"]
    tags = read_targets("t", _rows([[NFC, "x"], [NFD], ["x"]]), "tags", "multi-label")
    assert tags.names == [NFC, "x"]


def test_image_folders_in_two_unicode_forms_are_refused(tmp_path: Path) -> None:
    for name in (NFC, NFD, "tea"):
        (tmp_path / name).mkdir()
        for i in range(2):
            Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    with pytest.raises(DataError, match=r"class folders names 'café' twice, in different Unicode forms"):
        open_data(tmp_path)


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("a\x1b[31mred", r"t.jsonl, line 2: the label 'label' is 'a\\x1b\[31mred': a class name is 1 to"),
        (
            None,
            r"t.jsonl, line 2: \"label\" must be a class name \(string\) or class index \(integer\), got a JSON null",
        ),
        (True, r"got a JSON boolean"),
        ({"a": 1}, r"got a JSON object"),
    ],
)
def test_a_bad_class_label_is_refused_by_its_line(tmp_path: Path, label: object, message: str) -> None:
    data = tmp_path / "t.jsonl"
    rows = [{"text": "a", "label": "x"}, {"text": "b", "label": label}, {"text": "c", "label": "y"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError, match=message):
        open_data(data)


def test_a_null_label_in_an_image_list_is_called_null(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(4):
        Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
        rows.append({"file_name": f"img/{i}.png", "label": None if i == 2 else f"c{i % 2}"})
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError, match=r"metadata.jsonl, line 3: .*label.* JSON null"):
        open_data(tmp_path)
