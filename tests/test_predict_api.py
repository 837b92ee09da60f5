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
        r"this model reads preprocessed images of shape \[N, 1, 28",
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


def test_one_input_gets_one_answer_or_one_refusal_on_all_four_paths(run: tuple[Path, Path], capsys) -> None:
    """zoo.predict, the MLflow model, zoo predict on the command line and zoo serve (v1 with
    encoded images, v2 with tensors) answer the same images alike, and refuse NaN alike."""
    import base64

    from fastapi.testclient import TestClient

    import zoo.serve

    pytest.importorskip("mlflow")
    from zoo.training.finetune.mlflow_model import predict_table

    folder, data = run
    paths = sorted((data / "light").glob("*.png"))[:3]
    python = [row["classes"][0] for row in zoo.predict(folder, paths, top_k=1)]
    table = predict_table(folder, [str(p) for p in paths])
    assert [table.columns[i] for i in table.to_numpy().argmax(1)] == [top["label"] for top in python]
    np.testing.assert_allclose(table.to_numpy().max(1), [top["score"] for top in python], atol=1e-5)
    capsys.readouterr()
    assert main(["predict", str(folder), *map(str, paths), "--top-k", "1", "--no-progress"]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert [words[1] for words in printed] == [top["label"] for top in python]
    instances = [{"b64": base64.b64encode(p.read_bytes()).decode()} for p in paths]
    nan = {"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": [float("nan")] * 784}]}
    with TestClient(zoo.serve.app(str(folder), threads=1, max_batch=4)) as client:
        answer = client.post(f"/v1/models/{folder.name}:predict", json={"instances": instances, "top_k": 1}).json()
        refused = client.post(f"/v2/models/{folder.name}/infer", content=json.dumps(nan))
    served = [p["classes"][0] for p in answer["predictions"]]
    assert [s["label"] for s in served] == [top["label"] for top in python]
    assert [s["score"] for s in served] == pytest.approx([top["score"] for top in python], abs=1e-5)
    assert refused.status_code == 400 and "sample 0 holds NaN or infinite values" in refused.json()["error"]
    for path in (zoo.predict, predict_table):
        with pytest.raises(InvalidArgumentError, match=r"sample 0 holds NaN or infinite values"):
            path(folder, torch.full((1, 1, 28, 28), float("nan")))
