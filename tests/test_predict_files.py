"""``zoo predict NAME --input FILE`` (issue 49): SMILES, texts and image paths read from CSV,
JSONL, TXT or a folder, answered in the input's order as JSON lines or CSV, a row that cannot
be read reported in its ``error`` field; bad files refused in one line (exit 2), hostile ones
bounded; and ``zoo serve`` answering regression and multi-label models as predict prints them."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import input_rows, main, predict_files
from zoo.store.model_config import update_config

TINY_MOE = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
PREPROCESS = {"mean": [0.5] * 3, "std": [0.5] * 3, "resize": [12, 12]}


def saved(model: torch.nn.Module, folder: Path, **config) -> Path:
    """``model`` saved as a run folder would be, its configuration set as ``config`` says."""
    update_config(model, **config)
    return zoo.save(model.eval(), folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Saved models of each kind predict --input reads (random weights: the answers are
    checked against the same model's own forward)."""
    root = tmp_path_factory.mktemp("runs")
    torch.manual_seed(0)
    made = {}
    image = lambda n: zoo.load("resnet20", pretrained=False, num_classes=n, in_chans=3)  # noqa: E731
    made["classes"] = saved(image(3), root / "classes", preprocess=PREPROCESS, class_names=["ant", "bee", "cow"])
    labels = {"names": ["sky", "sea", "sand"], "thresholds": [0.2, 0.5, 0.9]}
    made["tags"] = saved(
        image(3), root / "tags", preprocess=PREPROCESS, class_names=labels["names"], multi_label=labels
    )
    made["age"] = saved(image(1), root / "age", preprocess=PREPROCESS, target={"name": "age", "mean": 30.0, "std": 9.0})
    text = zoo.load("moe_encoder", pretrained=False, num_classes=2, head="sequence_classification", **TINY_MOE)
    made["text"] = saved(text, root / "text", class_names=["neg", "pos"])
    return made


def images(folder: Path, count: int = 3) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        paths.append(folder / f"{i}.png")
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def rounded(answer):
    """An answer with its numbers to 4 decimals (a batch of one and a batch of several differ in the last bits)."""
    if isinstance(answer, dict):
        return {k: rounded(v) for k, v in answer.items()}
    if isinstance(answer, list):
        return [rounded(v) for v in answer]
    return round(answer, 4) if isinstance(answer, float) else answer


def rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_images_from_a_list_in_order_a_missing_one_reported(runs, tmp_path, capsys):
    paths = images(tmp_path / "imgs")
    listing = tmp_path / "imgs" / "list.txt"
    listing.write_text("0.png\nmissing.png\n2.png\n")  # relative to the list's folder
    assert main(["predict", str(runs["classes"]), "--input", str(listing), "--top-k", "2"]) == 0
    captured = capsys.readouterr()
    out = rows(captured.out)
    assert [r["line"] for r in out] == [1, 2, 3] and [r["input"] for r in out] == ["0.png", "missing.png", "2.png"]
    assert "missing.png does not exist" in out[1]["error"] and "classes" not in out[1]
    model = zoo.load(runs["classes"])
    with torch.no_grad():
        probs = model(torch.stack([zoo.transforms(model)(Image.open(p)) for p in paths])).softmax(-1)
    for row, expected in zip((out[0], out[2]), (probs[0], probs[2])):
        assert len(row["classes"]) == 2 and row["classes"][0]["score"] == pytest.approx(expected.max().item(), rel=1e-5)
        assert row["classes"][0]["label"] == ["ant", "bee", "cow"][int(expected.argmax())]
    assert captured.err.strip().startswith("zoo predict: 1 of 3 rows not predicted") and "line 2" in captured.err


def test_multi_label_and_regression_images_from_a_folder_as_csv(runs, tmp_path, capsys):
    images(tmp_path / "imgs", count=2)
    (tmp_path / "imgs" / "metadata.csv").write_text("file_name,id\n1.png,b\n0.png,a\n")
    assert main(["predict", str(runs["tags"]), "--input", str(tmp_path / "imgs"), "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["id"] for r in table] == ["b", "a"] and list(table[0]) == [
        "line",
        "id",
        "input",
        "labels",
        "scores",
        "error",
    ]
    model = zoo.load(runs["tags"])
    with torch.no_grad():
        probs = model(zoo.transforms(model)(Image.open(tmp_path / "imgs" / "1.png"))[None]).sigmoid()[0]
    over = [name for name, p, t in zip(["sky", "sea", "sand"], probs.tolist(), [0.2, 0.5, 0.9]) if p >= t]
    assert sorted(json.loads(table[0]["labels"])) == sorted(over)
    out = tmp_path / "ages.jsonl"
    assert main(["predict", str(runs["age"]), "--input", str(tmp_path / "imgs"), "--out", str(out)]) == 0
    ages = rows(out.read_text())
    assert [r["id"] for r in ages] == ["b", "a"] and all(r["target"] == "age" for r in ages)
    with torch.no_grad():
        value = zoo.load(runs["age"])(zoo.transforms(model)(Image.open(tmp_path / "imgs" / "0.png"))[None]).item()
    assert ages[1]["value"] == pytest.approx(value, rel=1e-5)  # the model's output: the units are folded in


def test_multi_label_csv_cells_are_json_lists_so_a_label_with_a_space_stays_one(runs, tmp_path, capsys):
    """A label that holds a space ("blue sky") is one label in the CSV: the cell is a JSON list,
    and the scores cell the list of their scores, in the same order."""
    names = {"names": ["blue sky", "sea", "sand"], "thresholds": [0.0, 0.0, 0.0]}  # every label predicted
    model = zoo.load(runs["tags"])
    run = saved(model, tmp_path / "spaced", preprocess=PREPROCESS, class_names=names["names"], multi_label=names)
    images(tmp_path / "imgs", count=1)
    assert main(["predict", str(run), "--input", str(tmp_path / "imgs"), "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    labels, scores = json.loads(row["labels"]), json.loads(row["scores"])
    assert sorted(labels) == ["blue sky", "sand", "sea"] and len(scores) == 3
    assert all(isinstance(score, float) and 0 <= score <= 1 for score in scores)


def test_text_rows_from_jsonl_and_txt(runs, tmp_path, capsys):
    path = tmp_path / "reviews.jsonl"
    path.write_text('{"id": 7, "text": "a fine film"}\n\n["not", "an object"]\n{"text": 3}\n{"text": "so bad"}\n')
    assert main(["predict", str(runs["text"]), "--input", str(path), "--top-k", "1"]) == 0
    out = rows(capsys.readouterr().out)
    assert [r["line"] for r in out] == [1, 3, 4, 5] and out[0]["id"] == "7"
    assert out[1]["error"] == "not a JSON object" and out[2]["error"] == "'text' is not a string"
    assert [c["label"] for c in out[0]["classes"]] in (["neg"], ["pos"]) and "classes" in out[3]
    lines = tmp_path / "reviews.txt"
    lines.write_text("a fine film\nso bad\n")
    assert main(["predict", str(runs["text"]), "--input", str(lines), "--format", "csv", "--top-k", "2"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["input"] for r in table] == ["a fine film", "so bad"] and {"label_2", "score_2"} <= set(table[0])
    assert float(table[0]["score_1"]) == pytest.approx(out[0]["classes"][0]["score"], abs=1e-4)


@pytest.mark.parametrize(
    "file,content,argv,message",
    [
        ("in.csv", None, ["classes", "--input", "{file}"], "in.csv does not exist"),
        ("in.csv", "id,smiles\n1,CCO\n", ["classes", "--input", "{file}"], "no 'file_name' or 'image'"),
        (
            "in.csv",
            'file_name\n"a.png\n',
            ["classes", "--input", "{file}"],
            "line 2: a quote opened on line 2 is never closed",
        ),
        ("in.txt", "nope.png\n", ["classes", "--input", "{file}"], "none of its 1 rows could be predicted"),
        ("in.txt", "a.png\n", ["classes", "x.png", "--input", "{file}"], "not both"),
        ("in.txt", None, ["classes", "x.png", "--format", "csv"], "add --input FILE"),
        ("in.csv", "a,b\n", ["text", "--input", "{file}"], "no 'text' column"),
        ("in.xml", "<a/>", ["text", "--input", "{file}"], "reads .csv, .jsonl, .txt (one input a line) or .smi"),
        ("in.csv", "text\nhi\n", ["text", "--input", "{file}", "--format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, capsys, file, content, argv, message):
    if content is not None:
        (tmp_path / file).write_text(content)
    argv = [str(runs[argv[0]]), *(a.replace("{file}", str(tmp_path / file)) for a in argv[1:])]
    if "invalid choice" in message:  # refused by the parser, as every flag's value is
        with pytest.raises(SystemExit) as refused:
            main(["predict", *argv])
        assert refused.value.code == 2
    else:
        assert main(["predict", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_hostile_inputs_are_bounded(runs, tmp_path, capsys, monkeypatch):
    huge = tmp_path / "huge.csv"
    with open(huge, "wb") as file:  # sparse: nothing is written, nothing is read
        file.truncate(input_rows.MAX_INPUT_BYTES + 1)
    assert main(["predict", str(runs["text"]), "--input", str(huge)]) == 2
    assert "over the 256 MiB zoo predict reads at once" in capsys.readouterr().err
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "ok"}\n' + "[" * 100_000 + "\n" + json.dumps({"text": "x" * 200_000}) + "\n")
    assert main(["predict", str(runs["text"]), "--input", str(deep)]) == 0
    out = rows(capsys.readouterr().out)
    assert "classes" in out[0] and out[1]["error"].startswith("not valid JSON") and "over 100,000" in out[2]["error"]
    monkeypatch.setattr(input_rows, "MAX_ROWS", 5)
    many = tmp_path / "many.txt"
    many.write_text("hi\n" * 50)
    assert main(["predict", str(runs["text"]), "--input", str(many)]) == 2
    assert "more than the 5 zoo predict" in capsys.readouterr().err


def test_smiles_from_a_csv_one_bad_row_reported(tmp_path, capsys):
    pytest.importorskip("rdkit")
    from zoo.loading.smiles import INPUT_FORMAT, feature_sizes, predict_molecules

    nodes, edges = feature_sizes()
    torch.manual_seed(0)
    model = zoo.load("gin3", pretrained=False, num_classes=1, head="graph_regression", in_channels=nodes,
                     edge_dim=edges, hidden_channels=16, num_layers=2)  # fmt: skip
    run = saved(model, tmp_path / "mol", input_format=INPUT_FORMAT, target={"name": "TPSA", "mean": 0.0, "std": 1.0})
    path = tmp_path / "test.csv"
    path.write_text("ID,SMILES,TPSA\nm1,CCO,20.2\nm2,C1CC(,3\nm3,c1ccccc1O,20.2\n=HYPERLINK(1),@SUM(A1),1\n")
    out = tmp_path / "out.csv"
    assert main(["predict", str(run), "--input", str(path), "--out", str(out)]) == 0
    assert "2 of 4 rows not predicted" in capsys.readouterr().err
    table = list(csv.DictReader(out.open()))
    assert [r["id"] for r in table][:3] == ["m1", "m2", "m3"] and "RDKit cannot parse it" in table[1]["error"]
    # a cell from the file that a spreadsheet would run as a formula is written behind a quote
    assert (table[3]["id"], table[3]["input"]) == ("'=HYPERLINK(1)", "'@SUM(A1)")
    safe = predict_files.spreadsheet_safe
    assert safe("-1.5") == "-1.5" and safe("-x") == "'-x" and safe(3) == 3
    expected = predict_molecules(zoo.load(run), ["CCO", "c1ccccc1O"])
    assert [float(table[0]["value"]), float(table[2]["value"])] == pytest.approx(expected, rel=1e-5)
    smi = tmp_path / "first.smi"  # Daylight's SMILES file, as RDKit's NCI set ships: SMILES, a tab, the name
    smi.write_text("SMILES\tName\nCCO\tethanol\nc1ccccc1O   phenol 2\nCC\n")  # ZINC's files have the header
    assert main(["predict", str(run), "--input", str(smi), "--out", str(tmp_path / "smi.csv")]) == 0
    table = list(csv.DictReader((tmp_path / "smi.csv").open()))
    assert [(r["id"], r["input"], r["error"]) for r in table] == [("ethanol", "CCO", ""), ("phenol 2", "c1ccccc1O", ""),
                                                                   ("", "CC", "")]  # fmt: skip
    assert [float(table[0]["value"]), float(table[1]["value"])] == pytest.approx(expected, rel=1e-5)


def test_served_answers_are_those_predict_prints(runs, tmp_path, capsys):
    import base64

    from fastapi.testclient import TestClient

    import zoo.serve

    (path,) = images(tmp_path / "imgs", count=1)
    answers = {}
    for name in ("tags", "age"):
        assert main(["predict", str(runs[name]), "--input", str(tmp_path / "imgs")]) == 0
        answers[name] = rows(capsys.readouterr().out)[0]
    app = zoo.serve.app(str(runs["tags"]), str(runs["age"]), str(runs["text"]), max_batch=4, threads=1)
    image = {"instances": [{"b64": base64.b64encode(path.read_bytes()).decode()}]}
    with TestClient(app) as client:
        for name in ("tags", "age"):
            served = client.post(f"/v1/models/{name}:predict", json=image).json()["predictions"][0]
            assert rounded(served) == rounded({k: v for k, v in answers[name].items() if k not in ("line", "input")})
        meta = client.get("/v2/models/tags").json()
        assert [o["name"] for o in meta["outputs"]] == ["probabilities", "decisions"]
        assert meta["parameters"]["thresholds"] == [0.2, 0.5, 0.9] and meta["parameters"]["task"] == "multi_label"
        assert client.get("/v2/models/age").json()["outputs"][0]["name"] == "prediction"
        texts = client.post("/v1/models/text:predict", json={"texts": ["a fine film"], "top_k": 1})
        assert texts.status_code == 200 and texts.json()["predictions"][0]["classes"][0]["label"] in ("neg", "pos")
        bad = client.post("/v1/models/text:predict", json={"texts": "not a list"})
        assert bad.status_code == 400 and "error" in bad.json()
        for empty in (["fine", ""], [""]):  # no token to read: was a 500 (alone) or a made-up answer (beside others)
            refused = client.post("/v1/models/text:predict", json={"texts": empty})
            assert refused.status_code == 400 and f"text {len(empty) - 1} is empty" in refused.json()["error"]
        v2 = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [""]}]}
        refused = client.post("/v2/models/text/infer", json=v2)
        assert refused.status_code == 400 and "text 0 is empty" in refused.json()["error"]
        assert client.get("/v2/health/live").status_code == 200  # still serving


def test_a_fifo_or_device_named_as_an_image_is_refused_without_opening_it(runs, tmp_path, capsys):
    folder = tmp_path / "imgs"
    images(folder, count=1)
    os.mkfifo(folder / "x.png")  # opening it would wait for a writer forever
    (folder / "list.csv").write_text("file_name\n0.png\nx.png\n")
    assert main(["predict", str(runs["classes"]), "--input", str(folder / "list.csv")]) == 0
    out = rows(capsys.readouterr().out)
    assert "classes" in out[0] and "x.png" in out[1]["error"] and "is not a regular file" in out[1]["error"]
    assert main(["predict", str(runs["classes"]), "--input", str(folder)]) == 0  # the folder lists x.png
    out = rows(capsys.readouterr().out)
    assert [r["input"] for r in out] == ["0.png", "x.png"] and "is not a regular file" in out[1]["error"]
    for path in (folder / "x.png", Path("/dev/zero")):
        assert main(["predict", str(runs["classes"]), str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path} is not a regular file" in err, err


def test_out_naming_the_input_file_is_refused(runs, tmp_path, capsys):
    listing = tmp_path / "in.txt"
    listing.write_text("hi\n")
    link = tmp_path / "same.txt"
    link.symlink_to(listing)
    for out in (listing, link):
        assert main(["predict", str(runs["text"]), "--input", str(listing), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is an input of this command" in err, err
    assert listing.read_text() == "hi\n"


def test_image_rows_never_lead_out_of_the_lists_folder(runs, tmp_path, capsys):
    outside = images(tmp_path / "secret", count=1)[0]
    folder = tmp_path / "imgs"
    images(folder, count=1)
    (folder / "out.png").symlink_to(outside)
    (folder / "list.txt").write_text(f"../secret/0.png\n{outside}\nout.png\n0.png\n")
    assert main(["predict", str(runs["classes"]), "--input", str(folder / "list.txt")]) == 0
    out = rows(capsys.readouterr().out)
    assert "leads out of" in out[0]["error"] and "absolute path" in out[1]["error"]
    assert "link that leads out of" in out[2]["error"] and "classes" in out[3]
    assert main(["predict", str(runs["classes"]), "--input", str(folder)]) == 0  # a folder's link out too
    out = {r["input"]: r for r in rows(capsys.readouterr().out)}
    assert "link that leads out of" in out["out.png"]["error"] and "classes" in out["0.png"]


@pytest.mark.parametrize("field", ["class_names", "multi_label"])
def test_unprintable_names_in_an_edited_config_are_refused(runs, tmp_path, capsys, field):
    run = tmp_path / "run"
    shutil.copytree(runs["tags"], run)
    config = json.loads((run / "config.json").read_text())
    forged = "\x1b[31mRED\x1b[0m\nzoo: fake line"
    if field == "class_names":
        config["class_names"][1] = forged
    else:
        config["multi_label"]["names"][1] = forged
    (run / "config.json").write_text(json.dumps(config))
    images(tmp_path / "imgs", count=1)
    assert main(["predict", str(run), str(tmp_path / "imgs" / "0.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "config.json" in err and "printable" in err, err
    assert ("class_names[1]" if field == "class_names" else "multi_label.names[1]") in err


def test_non_finite_values_are_written_as_json_null(tmp_path, capsys):
    model = zoo.load("resnet20", pretrained=False, num_classes=1, in_chans=3)
    with torch.no_grad():
        model.get_classifier().weight.fill_(-3e38)  # finite weights whose sum overflows: the value is -inf
        model.get_classifier().bias.fill_(-3e38)
    run = saved(model, tmp_path / "run", preprocess=PREPROCESS, target={"name": "age", "mean": 0.0, "std": 1.0})
    images(tmp_path / "imgs", count=1)
    assert main(["predict", str(run), "--input", str(tmp_path / "imgs"), "--format", "jsonl"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "Infinity" not in line and json.loads(line)["value"] is None
    assert predict_files.strict_json({"a": [float("nan"), 1.5, float("inf")]}) == '{"a": [null, 1.5, null]}'


def test_texts_as_arguments_to_a_text_model_point_to_input(runs, capsys):
    """A text model given texts as arguments is told to put them in a file (was: no such image file)."""
    assert main(["predict", str(runs["text"]), "good movie"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"zoo: error: {runs['text']} reads text, and zoo predict takes texts from a file, one per row: zoo predict "
        'NAME --input rows.csv (a text column) or rows.jsonl ({"text": ...} per line)'
    )
    assert main(["predict", "moe_lm.stdlib", "def fib("]) == 2
    assert capsys.readouterr().err.strip() == (
        "zoo: error: moe_lm.stdlib is a language model: continue a text with zoo generate NAME 'PROMPT'"
    )
    assert main(["predict", "resnet20.fmnist", "nothing.png"]) == 2  # an image model: the missing file
    assert "nothing.png: no such image file" in capsys.readouterr().err
