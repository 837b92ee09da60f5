"""Users' data through `zoo.training.data.kinds.open_data`: malformed CSV/JSONL rows, tensor files
with the wrong keys or values, image folders with stray, corrupt or missing files, a single
class, classes too small for the validation hold-out. Each case loads what it should, or
raises `DataError` naming the file (and the line of a text file) and the fix."""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from zoo import cli
from zoo.errors import DataError
from zoo.training.data.kinds import open_data, samples_needed


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def error_of(path: Path, **kwargs) -> str:
    with pytest.raises(DataError) as raised:
        open_data(path, **kwargs)
    message = str(raised.value)
    assert str(path) in message
    return message


# --- CSV ----------------------------------------------------------------------------------


def test_an_unquoted_comma_is_refused_not_read_as_the_label(tmp_path: Path) -> None:
    """20 rows of 2 classes, every text with a comma: once 20 one-sample classes, exit 0."""
    rows = [(f"review {i}, quite {'good' if i % 2 else 'bad'}", "pos" if i % 2 else "neg") for i in range(20)]
    path = write(tmp_path / "reviews.csv", "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows))
    message = error_of(path)
    assert "line 2:" in message and "3 fields where the header (text,label) has 2" in message
    assert "double quotes" in message
    quoted = write(tmp_path / "quoted.csv", "text,label\n" + "".join(f'"{t}",{label}\n' for t, label in rows))
    source = open_data(quoted)
    assert source.num_samples == 20 and source.class_names == ["neg", "pos"]


def test_a_row_without_a_label_is_refused_not_class_none(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "text,label\ngood,pos\nno label here\nbad,neg\n")
    message = error_of(path)
    assert "line 3:" in message and "the row has no label" in message


def test_an_empty_label_or_text_is_refused_with_its_line(tmp_path: Path) -> None:
    assert "line 3: the label is empty" in error_of(write(tmp_path / "a.csv", "text,label\ngood,pos\nbad,  \n"))
    assert "line 2: the text is empty" in error_of(write(tmp_path / "b.csv", "text,label\n ,pos\nbad,neg\n"))


@pytest.mark.parametrize(
    "content, line, words",
    [
        ('text,label\ngood,pos\n"oops,pos\nbad,neg\nworse,neg\n', 3, "is never closed"),  # reaches the end
        ('text,label\n"oops,pos\nbad,neg\n"worse",neg\nok,pos\n', 2, "a closing quote is followed by more text"),
    ],
)
def test_an_unclosed_quote_does_not_swallow_rows(tmp_path: Path, content: str, line: int, words: str) -> None:
    message = error_of(write(tmp_path / "q.csv", content))
    assert re.search(rf"line {line}\b", message) and words in message


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    path = write(tmp_path / "latin1.csv", "text,label\ngood,pos\ncafé crème,neg\n".encode("latin-1"))
    message = error_of(path)
    assert "line 3: byte 0xe9 is not UTF-8 text" in message and "save the file as UTF-8" in message


def test_bom_trailing_whitespace_and_blank_lines_are_fine(tmp_path: Path) -> None:
    content = '\ufefftext,label \r\n"good, really",pos  \r\n"bad","neg" \t\r\n\r\nmeh,neg\r\n\r\n   \r\n'
    source = open_data(write(tmp_path / "excel.csv", content))
    assert source.num_samples == 3 and source.class_names == ["neg", "pos"]
    assert [text for text, _ in source.full()] == ["good, really", "bad", "meh"]


def test_other_columns_and_multiline_quoted_texts_are_read(tmp_path: Path) -> None:
    content = 'id,label,text\n1,pos,"two\nlines, and ""quotes"""\n2,neg,plain\n'
    source = open_data(write(tmp_path / "t.csv", content))
    assert list(source.full()) == [('two\nlines, and "quotes"', 1), ("plain", 0)]


def test_the_header_is_required(tmp_path: Path) -> None:
    message = error_of(write(tmp_path / "t.csv", "good film,pos\nbad film,neg\n"))
    assert "line 1:" in message and "missing ['text', 'label']" in message and "header" in message
    assert "holds no rows" in error_of(write(tmp_path / "h.csv", "text,label\n\n"))
    assert "is empty" in error_of(write(tmp_path / "e.csv", ""))


def test_a_malformed_csv_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write(tmp_path / "t.csv", "text,label\ngood,pos\nhello, world,neg\n")
    argv = ["finetune", "resnet20", "--data", str(path), "--out", str(tmp_path / "out"), "--no-progress"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}, line 3: 3 fields" in err


# --- JSONL ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, words",
    [
        ('{"text": "b", "label": "neg"', "not valid JSON"),
        ('["b", "neg"]', "a JSON array, not an object"),
        ('{"text": "b"}', "missing ['label']"),
        (
            '{"text": "b", "label": null}',
            '"label" must be a class name (string) or class index (integer), got a JSON null',
        ),
        ('{"text": "b", "label": true}', "got a JSON boolean"),
        ('{"text": "b", "label": 1.5}', "got a JSON number"),
        ('{"text": 3, "label": "neg"}', '"text" must be a string'),
        ('{"text": "b", "label": " "}', "the label is empty"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path: Path, bad: str, words: str) -> None:
    path = write(tmp_path / "t.jsonl", '{"text": "a", "label": "pos"}\n\n' + bad + '\n{"text": "c", "label": "neg"}\n')
    message = error_of(path)
    assert "line 3:" in message and words in message


def test_jsonl_blank_lines_and_integer_labels(tmp_path: Path) -> None:
    rows = [{"text": "a", "label": 0}, {"text": "b", "label": 1}, {"text": "c", "label": "1"}]
    path = write(tmp_path / "t.jsonl", "\ufeff\n" + "\n\n".join(json.dumps(r) for r in rows) + "\n  \n")
    source = open_data(path)
    assert source.class_names == ["0", "1"] and source.class_counts == {"0": 1, "1": 2}


def test_integer_labels_from_1_warn_about_the_empty_class_0(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "text,label\na,1\nb,2\nc,2\n")
    with pytest.warns(UserWarning, match=r"class without samples \('0'\).*subtract 1 if yours start at 1"):
        source = open_data(path)
    assert source.class_counts == {"0": 0, "1": 1, "2": 2}
    assert "label -1" in error_of(write(tmp_path / "n.csv", "text,label\na,1\nb,-1\n"))
    assert "line 3: label 100000" in error_of(write(tmp_path / "big.csv", "text,label\na,1\nb,100000\n"))


# --- tensor files --------------------------------------------------------------------------


def test_tensor_files_with_wrong_keys(tmp_path: Path) -> None:
    torch.save({"x": torch.rand(4, 3), "label": torch.arange(4) % 2}, tmp_path / "a.pt")
    message = error_of(tmp_path / "a.pt")
    assert "no labels under 'y'" in message and "['label'] are not read" in message
    np.savez(tmp_path / "b.npz", inputs=np.random.rand(4, 3), y=np.arange(4) % 2)
    assert "expected the samples and labels under one of the key pairs x/y" in error_of(tmp_path / "b.npz")
    torch.save([torch.rand(4, 3)] * 3, tmp_path / "c.pt")
    assert "got a list of 3 items" in error_of(tmp_path / "c.pt")


@pytest.mark.parametrize(
    "x, y, words",
    [
        (np.random.rand(5, 3), np.arange(4) % 2, "5 samples under 'x' but 4 labels under 'y'"),
        (np.random.rand(4, 3), np.array([0.0, 1.0, 0.0, 1.0]), "'y' are torch.float64 numbers; expected integer"),
        (np.random.rand(4, 3), np.array(["a", "b", "a", "b"]), "'y' holds <U1 values; expected numbers"),
        (np.random.rand(4, 3), np.eye(4, 2, dtype=np.int64), "expected a 1-D tensor of class indices"),
        (np.random.rand(4, 3), np.array([0, 1, -1, 1]), "'y' must be class indices >= 0; sample 2 has -1"),
        (
            np.array([[0.0, 1], [np.nan, 1], [1, np.inf], [1, 2]]),
            np.arange(4) % 2,
            "NaN or infinite values in 2 samples",
        ),
        (np.zeros((0, 3)), np.zeros(0, dtype=np.int64), "'x' holds no samples"),
        (np.zeros((4, 0)), np.arange(4) % 2, "'x' holds no samples (shape (4, 0))"),
        (np.zeros((4, 8, 8, 3), np.uint8), np.arange(4) % 2, "channels last"),
    ],
)
def test_tensor_values_that_cannot_train_a_classifier(tmp_path: Path, x: np.ndarray, y: np.ndarray, words: str) -> None:
    np.savez(tmp_path / "d.npz", x=x, y=y)
    assert words in error_of(tmp_path / "d.npz")


def test_unreadable_tensor_files(tmp_path: Path) -> None:
    assert "is empty (0 bytes)" in error_of(write(tmp_path / "e.pt", b""))
    assert "g.pt is not a readable .pt tensor file" in error_of(write(tmp_path / "g.pt", b"not a pickle"))
    assert "cannot be read as a .npz tensor file" in error_of(write(tmp_path / "g.npz", b"PK\x03\x04 broken"))
    torch.save({"x": torch.rand(2, 2), "y": argparse.Namespace(labels=[0, 1])}, tmp_path / "o.pt")
    refused = error_of(tmp_path / "o.pt")
    assert "torch.load(weights_only=True): it would import argparse.Namespace" in refused
    assert "which a plain .pt tensor file never needs" in refused and "weights_only=False" not in refused


def test_tensor_class_names_and_counts(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "n.npz", x=np.random.rand(6, 3), y=np.array([0, 1, 1, 2, 2, 2]), classes=np.array(["a", "b", "c"])
    )
    source = open_data(tmp_path / "n.npz")
    assert source.class_names == ["a", "b", "c"] and source.class_counts == {"a": 1, "b": 2, "c": 3}
    assert source.describe_classes() == "3 classes: a (1), b (2), c (3)"
    torch.save({"x": torch.rand(4, 2), "y": torch.tensor([0, 1, 2, 1]), "classes": ["a", "b"]}, tmp_path / "m.pt")
    assert "'y' go up to 2 but 'classes' names 2 classes" in error_of(tmp_path / "m.pt")
    np.save(tmp_path / "u.npy", np.random.rand(4, 3))
    assert open_data(tmp_path / "u.npy").describe_classes() == "unlabelled"


# --- classes and the validation hold-out --------------------------------------------------------


def write_folder(root: Path, counts: dict[str, int], mode: str = "RGB", size: int = 6) -> Path:
    for name, count in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.new(mode, (size, size), color=i * 10).save(root / name / f"{i}.png")
    return root


def test_a_single_class_is_refused(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "cats", {"cat": 3})
    assert "has 1 class ('cat'): a classifier needs at least 2" in error_of(folder)
    assert "has 1 class ('cat')" in error_of(write(tmp_path / "t.csv", "text,label\na,cat\nb, cat\n"))
    np.savez(tmp_path / "t.npz", x=np.random.rand(3, 2), y=np.zeros(3, dtype=np.int64))
    assert "has 1 class ('0')" in error_of(tmp_path / "t.npz")


def test_class_counts_of_each_kind(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "images", {"ant": 2, "bee": 3})
    assert open_data(folder).class_counts == {"ant": 2, "bee": 3}
    text = write(tmp_path / "t.csv", "text,label\na,x\nb,y\nc,y\n")
    assert open_data(text).class_counts == {"x": 1, "y": 2}
    np.savez(tmp_path / "t.npz", x=np.random.rand(5, 2), y=np.array([1, 0, 1, 1, 0]))
    source = open_data(tmp_path / "t.npz")
    assert source.class_counts == {"0": 2, "1": 3} and source.describe_classes() == "2 classes: 0 (2), 1 (3)"


def labelled(tmp_path: Path, labels: list[int]) -> Path:
    np.savez(tmp_path / "d.npz", x=np.random.rand(len(labels), 2).astype(np.float32), y=np.array(labels))
    return tmp_path / "d.npz"


def test_a_class_the_hold_out_takes_entirely_is_refused(tmp_path: Path) -> None:
    n, seed = 20, 0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    labels = [i % 2 for i in range(n)]
    labels[order[0]] = 2  # class 2's only sample is the first one held out
    source = open_data(labelled(tmp_path, labels))
    with pytest.raises(
        DataError,
        match=r"takes every sample of class '2' \(1 sample\), leaving none to train on; "
        r"at val_fraction 0.1 each class needs at least 10 samples",
    ):
        source.split(0.1, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train, val = source.split(0.0, seed=seed)  # no hold-out (e.g. --val-data): nothing to check
    assert len(train) == n and val is None


def test_a_class_too_small_for_the_hold_out_warns(tmp_path: Path) -> None:
    source = open_data(labelled(tmp_path, [0] * 10 + [1] * 10 + [2] * 3))
    with pytest.warns(UserWarning, match=r"class '2' \(3 samples, \d in validation\) has fewer than the 10 samples"):
        source.split(0.1, seed=0)
    assert samples_needed(0.25) == 4 and samples_needed(0.5) == 2 and samples_needed(0.9) == 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        source.split(0.34, seed=0)  # 3 samples suffice at a third


# --- image folders ---------------------------------------------------------------------------


def test_non_image_and_hidden_files_are_skipped(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "images", {"ant": 2, "bee": 2})
    write(root / "ant" / "notes.txt", "not an image")
    write(root / "ant" / ".DS_Store", b"\x00\x00\x00\x01Bud1")
    write(root / "bee" / "._0.png", b"\x00\x05\x16\x07 AppleDouble")  # macOS resource fork
    (root / ".ipynb_checkpoints").mkdir()
    write(root / "README.md", "about these images")
    source = open_data(root)
    assert source.class_names == ["ant", "bee"] and source.num_samples == 4
    assert [label for _, label in source.full()] == [0, 0, 1, 1]


def test_a_corrupt_image_is_named(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "images", {"ant": 2, "bee": 2})
    write(root / "bee" / "2.png", b"this is not a png")
    message = error_of(root)  # among the first files: found before training
    assert f"{root / 'bee' / '2.png'} is not a readable image" in message and "remove it" in message

    late = write_folder(tmp_path / "late", {"ant": 10, "bee": 10})
    png = (late / "bee" / "9.png").read_bytes()
    write(late / "bee" / "9.png", png[: len(png) // 2])  # a valid header, truncated pixels
    with pytest.raises(DataError, match=re.escape(f"{late / 'bee' / '9.png'} is not a readable image")):
        open_data(late)  # every image is checked whole before training, not found mid-epoch


def test_empty_folders_are_refused_by_name(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "images", {"ant": 2, "bee": 2})
    (root / "cow").mkdir()
    write(root / "cow" / "notes.txt", "to do")
    message = error_of(root)
    assert f"{root / 'cow'} holds no images" in message and "class 'cow'" in message
    (tmp_path / "empty").mkdir()
    assert "holds no class folders" in error_of(tmp_path / "empty")
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.new("L", (4, 4)).save(flat / "a.png")
    assert "holds 1 image but no class sub-folders" in error_of(flat)


def test_an_unknown_suffix_is_a_data_error(tmp_path: Path) -> None:
    assert "unknown data format '.xlsx'" in error_of(write(tmp_path / "t.xlsx", b"PK"))
