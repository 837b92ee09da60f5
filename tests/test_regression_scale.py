"""Regression is scale-free (issue 62, case 1): targets far from zero (1.7e9 + 10 i, 1e12 + 0.01 i)
train, score and predict as targets near zero do. An affine map ``y -> a y + b`` (a > 0) of the
targets maps the predictions and MAE/RMSE alike and leaves R² as it was, for one training step,
the epoch's metrics, ``zoo eval --data`` and ``zoo predict``, on image lists, text rows, tensors
and molecules."""

from __future__ import annotations

import csv
import json
import math
import statistics
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

import zoo
from zoo.cli import main
from zoo.training.loop.meter import EpochMeter, regression_metrics
from zoo.training.loop.steps import RegressionStep, folds_exactly, regression_sums
from zoo.training.scoring import score_file

pytestmark = pytest.mark.usefixtures("one_thread")
QUICK = dict(epochs=2, batch_size=4, progress=False, tensorboard=False, plot=False, post_training=False, seed=0)
SCALES = st.floats(1e-3, 1e4)
SHIFTS = st.floats(-1e10, 1e10)


def _targets(count: int = 16) -> np.ndarray:
    """Targets that vary irregularly, near zero."""
    return np.round(np.sin(np.arange(count) * 1.3) * 5 + np.arange(count) * 0.25, 3)


def _fit(x: torch.Tensor, y: torch.Tensor) -> tuple[RegressionStep, nn.Linear, dict[str, float], torch.Tensor]:
    """One step of a fixed linear model on targets ``y`` standardised as the data readers do."""
    values = y.tolist()
    step = RegressionStep(statistics.fmean(values), statistics.stdev(values))
    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], 1)
    out = step(model, (x, y))
    meter = EpochMeter()
    meter.update(out.loss, len(y), None, None, out.logs)
    return step, model, meter.result("val"), out.logits


@settings(max_examples=60, deadline=None)
@given(scale=SCALES, shift=SHIFTS)
@example(scale=10 / 1.5, shift=1.7e9)  # the 1700000000 + 10 i
@example(scale=0.01 / 1.5, shift=1e12)  # and 1e12 + 0.01 i
def test_a_step_and_its_metrics_follow_an_affine_map_of_the_targets(scale: float, shift: float) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 3, generator=g)
    y = torch.tensor(_targets(24), dtype=torch.float64)
    _, _, base, predicted = _fit(x, y)
    _, _, moved, moved_predicted = _fit(x, scale * y + shift)
    spread = scale * float(y.std())
    # float64 itself rounds a y + b to a multiple of its spacing: 1e12 + 0.01 i keeps about 2 digits
    rel = 1e-4 + 10 * float(np.spacing(abs(shift) + 10 * spread)) / spread
    assert moved["val_loss"] == pytest.approx(base["val_loss"], rel=rel)
    assert torch.allclose(moved_predicted, scale * predicted + shift, rtol=0, atol=rel * spread)
    for name in ("val_mae", "val_rmse"):
        assert moved[name] == pytest.approx(scale * base[name], rel=rel)
    assert moved["val_r2"] == pytest.approx(base["val_r2"], abs=rel)


def test_r2_of_targets_near_1e_42_is_a_number() -> None:
    truth = torch.tensor([1.0, 2.0, 3.0, 5.0], dtype=torch.float64) * 1e-42
    scores = regression_metrics({k: float(v) for k, v in regression_sums(truth * 1.1, truth, 2e-42).items()})
    assert math.isfinite(scores["r2"]) and scores["r2"] == pytest.approx(1 - 0.01 * 39 / 8.75, rel=1e-6)
    assert folds_exactly(3.0, 1.5) and not folds_exactly(1.7e9, 47.0) and not folds_exactly(0.0, 1e-42)


# -- end to end, one file per kind of data ------------------------------------------------------


def _image_list(folder: Path, values: list[float]) -> Path:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    for i in range(len(values)):
        Image.fromarray(np.full((12, 12), 15 * i % 256, dtype=np.uint8)).save(folder / "img" / f"{i}.png")
    lines = "".join(f"img/{i}.png,{v!r}\n" for i, v in enumerate(values))
    (folder / "metadata.csv").write_text("file_name,price\n" + lines)
    return folder


def _text_rows(folder: Path, values: list[float]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [(f"{'good ' * (i % 5)}film {i}", v) for i, v in enumerate(values)]
    (folder / "rows.csv").write_text("text,price\n" + "".join(f'"{t}",{v!r}\n' for t, v in rows))
    return folder / "rows.csv"


def _tensors(folder: Path, values: list[float]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    x = torch.rand(len(values), 6, generator=torch.Generator().manual_seed(0))
    torch.save({"x": x, "y": torch.tensor(values, dtype=torch.float64)}, folder / "data.pt")
    return folder / "data.pt"


def _molecules(folder: Path, values: list[float]) -> Path:
    rdkit = pytest.importorskip("rdkit")
    table = Path(rdkit.__file__).parent / "Data" / "NCI" / "first_5k.tpsa.csv"
    lines = [line for line in table.read_text().splitlines() if line.strip() and not line.startswith("#")]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "mols.csv", "w", newline="") as file:
        rows = [[line.rsplit(",", 1)[0], repr(v)] for line, v in zip(lines, values)]
        csv.writer(file).writerows([["smiles", "price"], *rows])
    return folder / "mols.csv"


TINY_TEXT = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
KINDS = {
    "image list": (_image_list, "resnet20", {}),
    "text rows": (_text_rows, "moe_encoder", {"label_field": "price", "model_kwargs": TINY_TEXT}),
    "tensors": (_tensors, "dbn", {"task": "regression", "model_kwargs": {"sizes": [6, 4]}}),
    "molecules": (
        _molecules,
        "gin3",
        {"label_field": "price", "model_kwargs": {"hidden_channels": 8, "num_layers": 2}},
    ),
}


def _run(kind: str, folder: Path, values: list[float]) -> tuple[dict[str, float], dict[str, float], list[float]]:
    """Fine-tune on ``values``; the run's validation metrics, zoo eval's scores on the training
    file, and the predictions on it in the target's units: ``zoo predict`` (image folders),
    `predict_molecules` (SMILES) and the MLflow model's `Predictor` (text rows, tensors)."""
    write, name, options = KINDS[kind]
    data = write(folder / "data", values)
    options = {**options, "task": "regression"} if kind == "image list" else options
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = zoo.finetune(name, data, folder / "run", val_fraction=0.25, **QUICK, **options)
        scores = score_file(str(folder / "run"), data, progress=False)
    return result.metrics, scores, _predicted(kind, folder / "run", data)


def _predicted(kind: str, run: Path, data: Path) -> list[float]:
    if kind == "image list":
        assert main(["predict", str(run), "--input", str(data), "--out", str(run.parent / "p.jsonl")]) == 0
        values = [json.loads(line)["value"] for line in (run.parent / "p.jsonl").read_text().splitlines()]
        assert main(["predict", str(run), "--input", str(data), "--out", str(run.parent / "p.csv")]) == 0
        rows = list(csv.DictReader((run.parent / "p.csv").open()))  # every digit, as the JSON lines hold them
        assert [float(row["value"]) for row in rows] == values
        return values
    if kind == "molecules":
        from zoo.loading.smiles import predict_molecules

        rows = list(csv.reader(data.open()))[1:]
        return predict_molecules(zoo.load(run), [smiles for smiles, _ in rows])
    pytest.importorskip("mlflow")
    from zoo.training.finetune.mlflow_model import Predictor

    if kind == "text rows":
        inputs = [text for text, _ in list(csv.reader(data.open()))[1:]]
    else:
        inputs = torch.load(data, weights_only=True)["x"].numpy()
    return Predictor(run)(inputs).iloc[:, 0].tolist()


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=2, deadline=None)
@given(scale=st.floats(1e-2, 1e3), shift=st.floats(-1e9, 1e9))
@example(scale=10 / 1.5, shift=1.7e9)
def test_a_run_scores_and_predicts_an_affine_map_of_its_targets_alike(
    kind: str, scale: float, shift: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    values = _targets().tolist()
    base = _run(kind, tmp_path_factory.mktemp("base"), values)
    moved = _run(kind, tmp_path_factory.mktemp("moved"), [scale * v + shift for v in values])
    for (metrics, scores), (moved_metrics, moved_scores) in [((base[0], base[1]), (moved[0], moved[1]))]:
        for name in ("mae", "rmse"):
            assert moved_metrics[f"val_{name}"] == pytest.approx(scale * metrics[f"val_{name}"], rel=1e-3)
            assert moved_scores[name] == pytest.approx(scale * scores[name], rel=1e-3)
        assert moved_metrics["val_r2"] == pytest.approx(metrics["val_r2"], abs=1e-3)
        assert moved_scores["r2"] == pytest.approx(scores["r2"], abs=1e-3) and math.isfinite(scores["r2"])
    spread = scale * float(np.std(values))
    assert len(moved[2]) == len(base[2]) == len(values)
    for got, want in zip(moved[2], base[2]):
        assert got == pytest.approx(scale * want + shift, abs=1e-3 * spread)
