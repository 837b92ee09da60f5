"""``zoo.predict`` and ``zoo.evaluate`` (issue 63): one predictor (`zoo.inference.Predictor`) from
every input kind to rows with the run's meaning, the same answers and refusals through the MLflow
model, the metrics of ``zoo eval --data``; and a run folder's name taken by ``zoo.transforms``
and ``zoo.info`` as ``zoo.load`` takes it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.errors import DataError, InvalidArgumentError, ZooError

pytestmark = pytest.mark.usefixtures("one_thread")
QUICK = dict(epochs=1, batch_size=8, progress=False, tensorboard=False, plot=False, post_training=False, seed=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run fine-tuned from resnet20.fmnist on 3 classes of 6 small gray images, and its data."""
    root = tmp_path_factory.mktemp("predict")
    rng = np.random.default_rng(0)
    for c, name in enumerate(("dark", "mid", "light")):
        (root / "data" / name).mkdir(parents=True)
        for i in range(6):
            pixels = np.clip(rng.normal(60 + 70 * c, 20, (28, 28)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "data" / name / f"{i}.png")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zoo.finetune("resnet20.fmnist", root / "data", root / "run", val_fraction=0.34, **QUICK)
    return root / "run", root / "data"


def own_probabilities(run: Path, paths: list[Path]) -> torch.Tensor:
    model = zoo.load(run).eval()
    preprocess = zoo.transforms(model)
    with torch.no_grad():
        return model(torch.stack([preprocess(Image.open(p)) for p in paths])).softmax(-1)


def test_every_image_input_kind_gives_the_models_own_answer(run: tuple[Path, Path]) -> None:
    folder, data = run
    paths = sorted((data / "mid").glob("*.png"))
    expected = own_probabilities(folder, paths)
    pixels = np.stack([np.asarray(Image.open(p)) for p in paths])
    preprocessed = torch.stack([zoo.transforms(folder)(Image.open(p)) for p in paths])
    for given in ([str(p) for p in paths], data / "mid", [Image.open(p) for p in paths], pixels, preprocessed):
        rows = zoo.predict(folder, given, top_k=3)
        assert len(rows) == len(paths)
        for row, want in zip(rows, expected):
            top = row["classes"][0]
            assert top["label"] == ["dark", "light", "mid"][int(want.argmax())]
            assert top["score"] == pytest.approx(float(want.max()), abs=1e-5)


def test_zoo_evaluate_is_zoo_eval_data(run: tuple[Path, Path], tmp_path: Path) -> None:
    folder, data = run
    scores = zoo.evaluate(folder, data)
    assert main(["eval", str(folder), "--data", str(data), "--out", str(tmp_path / "m.json"), "--no-progress"]) == 0
    written = json.loads((tmp_path / "m.json").read_text())
    assert scores["accuracy"] == pytest.approx(written["accuracy"]) and scores["samples"] == 18
    with pytest.raises(InvalidArgumentError, match=r"zoo.evaluate\(model, data\)"):
        zoo.evaluate(folder, 3)  # type: ignore[arg-type]


def test_a_run_folder_is_a_name_for_transforms_and_info(run: tuple[Path, Path]) -> None:
    folder, _ = run
    assert zoo.transforms(folder)(Image.new("L", (28, 28))).shape == (1, 28, 28)
    info = zoo.info(folder)
    assert info.arch == "resnet20" and info.num_classes == 3 and info.card == str(folder / "README.md")
    assert zoo.info("resnet20.fmnist").name == "resnet20.fmnist"


HOSTILE = [
    ([], InvalidArgumentError, r"no inputs: pass one or more images"),
    ([3], InvalidArgumentError, r"inputs\[0\] is of type int; an image model reads image files"),
    (torch.full((1, 1, 28, 28), float("nan")), InvalidArgumentError, r"sample 0 holds NaN or infinite values"),
    (
        np.zeros((2, 3, 5), np.float32),
        InvalidArgumentError,
        r"input \(preprocessed images\) has shape \[-1, 1, 28, 28\] \(-1: any size\); got \[2, 3, 5\]",
    ),
    (["missing.png"], DataError, r"missing.png: no such image file"),
]


@pytest.mark.parametrize(("given", "error", "message"), HOSTILE)
def test_a_bad_input_is_refused_alike_by_zoo_predict_and_the_mlflow_model(
    run: tuple[Path, Path], given: object, error: type[ZooError], message: str
) -> None:
    folder, _ = run
    with pytest.raises(error, match=message):
        zoo.predict(folder, given)
    pytest.importorskip("mlflow")
    from zoo.training.finetune.mlflow_model import predict_table

    with pytest.raises(error, match=message):
        predict_table(folder, given)


def test_texts_and_smiles_read_as_their_models_read_them(tmp_path: Path) -> None:
    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    torch.manual_seed(0)
    texts = zoo.load("moe_encoder", pretrained=False, num_classes=2, **tiny).eval()
    texts.pretrained_cfg["class_names"] = ["no", "yes"]
    rows = zoo.predict(texts, ["so bad", "great!"], top_k=1)
    assert [len(r["classes"]) for r in rows] == [1, 1] and rows[0]["classes"][0]["label"] in ("no", "yes")
    with pytest.raises(InvalidArgumentError, match=r"inputs\[1\] is of type bytes; this model reads texts as strings"):
        zoo.predict(texts, ["ok", b"bytes"])
    lm = zoo.load("moe_lm", pretrained=False, **tiny)
    with pytest.raises(InvalidArgumentError, match=r"does not predict classes or values .* zoo generate"):
        zoo.predict(lm, ["def "])


# --- one input, one answer or one refusal, on every path ------------------------------------
# zoo.predict, the MLflow model, zoo predict (arguments and --input rows) and zoo serve (v1 and v2)
# prepare inputs through one Predictor: the same answers, and the same refusal text, on each.

NOT_AN_IMAGE = "is not a readable image (no image format PIL reads); remove it or replace it"


def refusal(call: object, *arguments: object) -> str:
    """The text of the zoo error ``call(*arguments)`` raises."""
    with pytest.raises(ZooError) as raised:
        call(*arguments)  # type: ignore[operator]
    return str(raised.value)


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``zoo predict ARGV``'s exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(["predict", *map(str, argv), "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def same_top(answers: list[dict], labels: list[str], scores: list[float]) -> None:
    assert [a["classes"][0]["label"] for a in answers] == labels
    assert [a["classes"][0]["score"] for a in answers] == pytest.approx(scores, abs=1e-5)


def same_scores(answers: list[dict], scores: list[dict[str, float]]) -> None:
    """Each answer's classes, by label, with the scores ``scores`` gives (within 1e-5)."""
    assert len(answers) == len(scores)
    for answer, want in zip(answers, scores):
        assert {c["label"]: c["score"] for c in answer["classes"]} == pytest.approx(want, abs=1e-5)


def v2_body(name: str, data: list, shape: list[int], datatype: str = "FP32") -> dict:
    return {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}


def test_images_get_one_answer_or_one_refusal_on_every_path(run: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    import base64
    import shutil

    from fastapi.testclient import TestClient

    import zoo.serve

    pytest.importorskip("mlflow")
    from zoo.training.finetune.mlflow_model import predict_table

    folder, data = run
    paths = [Path(shutil.copy(p, tmp_path)) for p in sorted((data / "light").glob("*.png"))[:3]]
    notes, missing = tmp_path / "notes.png", tmp_path / "missing.png"
    notes.write_text("not an image\n")
    top = [row["classes"][0] for row in zoo.predict(folder, paths, top_k=1)]
    labels, scores = [t["label"] for t in top], [t["score"] for t in top]
    encoded = [p.read_bytes() for p in paths]  # what a client sends base64-encoded
    same_top(zoo.predict(folder, encoded, top_k=1), labels, scores)
    same_top(zoo.predict(folder, paths, top_k=1, num_workers=2), labels, scores)  # decoded by 2 processes
    for given in ([str(p) for p in paths], encoded):
        table = predict_table(folder, given)
        assert [table.columns[i] for i in table.to_numpy().argmax(1)] == labels
        np.testing.assert_allclose(table.to_numpy().max(1), scores, atol=1e-5)
    code, out, _ = cli(capsys, folder, *paths, "--top-k", "1")
    assert code == 0 and [line.split()[1] for line in out.splitlines() if line.startswith("  ")] == labels
    listing = tmp_path / "list.csv"
    listing.write_text("file_name\n" + "".join(f"{p.name}\n" for p in (*paths, notes, missing)))
    code, out, _ = cli(capsys, folder, "--input", listing, "--top-k", "1", "--num-workers", "2")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["line"] for r in rows] == [2, 3, 4, 5, 6]
    same_top(rows[:3], labels, scores)
    assert rows[3]["error"] == f"notes.png {NOT_AN_IMAGE}"
    assert "missing.png" in rows[4]["error"] and "does not exist" in rows[4]["error"]  # the image lists' rule
    preprocessed = torch.stack([zoo.transforms(folder)(Image.open(p)) for p in paths])
    name = folder.name
    with TestClient(zoo.serve.app(str(folder), threads=1, max_batch=4)) as client:
        b64 = [{"b64": base64.b64encode(raw).decode()} for raw in encoded]
        v1 = client.post(f"/v1/models/{name}:predict", json={"instances": b64, "top_k": 1})
        files = [("image", (p.name, raw, "image/png")) for p, raw in zip(paths, encoded)]
        form = client.post(f"/v1/models/{name}:predict", files=files, data={"top_k": "1"})
        v2 = client.post(
            f"/v2/models/{name}/infer", json=v2_body("input", preprocessed.flatten().tolist(), [3, 1, 28, 28])
        )
        refused = _served_refusals(client, name, notes)
    for answer in (v1, form):
        assert answer.status_code == 200, answer.text
        same_top(answer.json()["predictions"], labels, scores)
    logits = torch.tensor(v2.json()["outputs"][0]["data"]).reshape(3, -1)
    np.testing.assert_allclose(logits.softmax(-1).max(-1).values.numpy(), scores, atol=1e-5)
    _refused_alike(folder, notes, missing, refused, capsys)


def _served_refusals(client, name: str, notes: Path) -> dict[str, tuple[int, str]]:
    """zoo serve's answers to the hostile inputs: (status, error) by input."""
    import base64

    infer, predict = f"/v2/models/{name}/infer", f"/v1/models/{name}:predict"
    sent = {
        "nan": (infer, v2_body("input", [float("nan")] * 784, [1, 1, 28, 28])),
        "shape": (infer, v2_body("input", [0.0] * 30, [2, 3, 5])),
        "shape v1": (predict, {"instances": np.zeros((2, 3, 5)).tolist()}),
        "not an image": (predict, {"instances": [{"b64": base64.b64encode(notes.read_bytes()).decode()}]}),
        "empty": (infer, v2_body("input", [], [0, 1, 28, 28])),
        "empty v1": (predict, {"instances": []}),
    }
    answers = {key: client.post(route, content=json.dumps(body)) for key, (route, body) in sent.items()}
    return {key: (answer.status_code, answer.json()["error"]) for key, answer in answers.items()}


def _refused_alike(folder: Path, notes: Path, missing: Path, served: dict, capsys) -> None:
    """Each hostile input refused with one text by zoo.predict, the MLflow model, zoo predict and zoo serve."""
    from zoo.training.finetune.mlflow_model import predict_table

    hostile = {
        "nan": (torch.full((1, 1, 28, 28), float("nan")), "sample 0 holds NaN or infinite values; pass finite numbers"),
        "shape": (np.zeros((2, 3, 5), np.float32), "has shape [-1, 1, 28, 28] (-1: any size); got [2, 3, 5]"),
        "missing": ([str(missing)], f"{missing}: no such image file"),
        "not an image": ([str(notes)], f"{notes} {NOT_AN_IMAGE}"),
        "empty": ([], "no inputs: pass one or more"),
    }
    for key, (given, words) in hostile.items():
        for call in (zoo.predict, predict_table):
            assert words in refusal(call, folder, given), (key, call)
    for path in (missing, notes):  # the command line takes files (its own words for no input at all)
        code, _, err = cli(capsys, folder, path)
        assert code == 2 and err == f"zoo: error: {refusal(zoo.predict, folder, [str(path)])}\n"
    assert cli(capsys, folder)[0] == 2
    for key in ("nan", "shape", "not an image", "empty"):
        status, error = served[key]
        assert status == 400 and hostile[key][1].replace(str(notes), "instances[0]") in error, (key, error)
    assert served["shape v1"][0] == 400 and hostile["shape"][1] in served["shape v1"][1]
    assert served["empty v1"][0] == 400 and "instances" in served["empty v1"][1]  # the request's own validation


@pytest.fixture(scope="module")
def strings_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A text classifier (neg, pos) and a SMILES regression (TPSA), small and of random weights, saved."""
    pytest.importorskip("rdkit")
    from zoo.loading.smiles import INPUT_FORMAT, feature_sizes
    from zoo.store.model_config import update_config

    root = tmp_path_factory.mktemp("strings")
    tiny = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
    torch.manual_seed(0)
    text = zoo.load("moe_encoder", pretrained=False, num_classes=2, head="sequence_classification", **tiny)
    update_config(text, class_names=["neg", "pos"])
    nodes, edges = feature_sizes()
    mol = zoo.load("gin3", pretrained=False, num_classes=1, head="graph_regression", in_channels=nodes,
                   edge_dim=edges, hidden_channels=16, num_layers=2)  # fmt: skip
    update_config(mol, input_format=INPUT_FORMAT, target={"name": "TPSA", "mean": 20.0, "std": 5.0})
    return zoo.save(text.eval(), root / "texts"), zoo.save(mol.eval(), root / "mol")


def test_texts_and_smiles_get_one_answer_or_one_refusal_on_every_path(strings_models, tmp_path: Path, capsys) -> None:
    from fastapi.testclient import TestClient

    import zoo.serve

    pytest.importorskip("mlflow")
    from zoo.training.finetune.mlflow_model import predict_table

    texts_run, mol_run = strings_models
    texts, smiles = ["a fine film", "so bad"], ["CCO", "c1ccccc1O"]
    classes = zoo.predict(texts_run, texts, top_k=2)
    scores = [{c["label"]: c["score"] for c in answer["classes"]} for answer in classes]
    values = [answer["value"] for answer in zoo.predict(mol_run, smiles)]
    table = predict_table(texts_run, texts)
    assert [row == pytest.approx(want, abs=1e-5) for row, want in zip(table.to_dict("records"), scores)] == [1, 1]
    assert predict_table(mol_run, smiles)["TPSA"].tolist() == pytest.approx(values, rel=1e-5)
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n")
    (tmp_path / "mol.csv").write_text("smiles\n" + "\n".join([*smiles, "C1CC("]) + "\n")
    code, out, _ = cli(capsys, texts_run, "--input", tmp_path / "texts.txt", "--top-k", "2")
    assert code == 0
    same_scores([json.loads(line) for line in out.splitlines()], scores)
    code, out, _ = cli(capsys, mol_run, "--input", tmp_path / "mol.csv")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["value"] for r in rows[:2]] == pytest.approx(values, rel=1e-5)
    bad_smiles = "'C1CC(' is not a usable SMILES (RDKit cannot parse it); check it"
    assert rows[2]["error"] == bad_smiles
    code, out, _ = cli(capsys, mol_run, *smiles)
    assert code == 0 and [float(line.split("\t")[1].split()[0]) for line in out.splitlines()] == pytest.approx(
        values, rel=1e-5
    )
    with TestClient(zoo.serve.app(str(texts_run), str(mol_run), threads=1)) as client:
        v1_texts = client.post("/v1/models/texts:predict", json={"texts": texts, "top_k": 2}).json()
        v2_texts = client.post("/v2/models/texts/infer", json=v2_body("text", texts, [2], "BYTES")).json()
        v1_smiles = client.post("/v1/models/mol:predict", json={"smiles": smiles}).json()
        v2_smiles = client.post("/v2/models/mol/infer", json=v2_body("smiles", smiles, [2], "BYTES")).json()
        refused = {
            "text v1": client.post("/v1/models/texts:predict", json={"texts": ["fine", ""]}),
            "text v2": client.post("/v2/models/texts/infer", json=v2_body("text", ["fine", ""], [2], "BYTES")),
            "smiles v1": client.post("/v1/models/mol:predict", json={"smiles": ["CCO", "C1CC("]}),
            "smiles v2": client.post("/v2/models/mol/infer", json=v2_body("smiles", ["CCO", "C1CC("], [2], "BYTES")),
        }
    same_scores(v1_texts["predictions"], scores)
    probabilities = torch.tensor(v2_texts["outputs"][0]["data"]).reshape(2, 2).softmax(-1)
    np.testing.assert_allclose(probabilities.numpy(), [[s["neg"], s["pos"]] for s in scores], atol=1e-5)
    assert [p["value"] for p in v1_smiles["predictions"]] == pytest.approx(values, rel=1e-5)
    assert v2_smiles["outputs"][0]["data"] == pytest.approx(values, rel=1e-5)
    empty_text = "text 1 is empty: give each text at least one character"
    for call in (zoo.predict, predict_table):
        assert empty_text in refusal(call, texts_run, ["fine", ""])
        assert bad_smiles in refusal(call, mol_run, ["CCO", "C1CC("])
    assert cli(capsys, mol_run, "CCO", "C1CC(")[2] == f"zoo: error: SMILES[1] {bad_smiles}\n"
    for key, answer in refused.items():
        words = empty_text if key.startswith("text") else bad_smiles
        assert answer.status_code == 400 and words in answer.json()["error"], (key, answer.text)
