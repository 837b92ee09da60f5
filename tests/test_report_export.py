"""training.report (metrics against scikit-learn, plots, JSON), zoo.deploy.exporter's TorchScript /
torch.export round trips, and training.post_training (int8 dynamic quantization, magnitude pruning,
post_training) on small generated data."""

from __future__ import annotations

import copy
import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import zoo
from zoo.deploy.exporter import NOT_TENSORS_REASON, ExportMismatchError, export_program, export_torchscript
from zoo.store.files import write_json
from zoo.training.finetune.post_training import (
    global_magnitude_prune,
    linear_fraction,
    post_training,
    quantize_dynamic_int8,
    state_dict_bytes,
    weight_sparsity,
)
from zoo.training.finetune.report import (
    classification_report,
    evaluate_classifier,
    plot_confusion_matrix,
)
from zoo.training.loop.records.curves import plot_curves

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _two_threads() -> None:
    torch.set_num_threads(2)


def _mlp(in_features: int = 48, hidden: int = 256, num_classes: int = 5) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)).eval()


@pytest.fixture(scope="module")
def resnet20() -> nn.Module:
    torch.manual_seed(0)
    return zoo.load("resnet20", pretrained=False, num_classes=10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_sklearn(seed: int) -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(seed)
    num_classes = 7
    targets = torch.randint(0, num_classes - 1, (300,), generator=g)  # class 6 never occurs...
    noise = torch.randint(0, num_classes - 2, (300,), generator=g)
    predictions = torch.where(torch.rand(300, generator=g) < 0.6, targets, noise)
    predictions[:3] = 4  # ...and class 5 is rarely predicted, so zero-division paths are exercised
    report = classification_report(predictions, targets, num_classes)
    y, p, labels = targets.numpy(), predictions.numpy(), list(range(num_classes))

    assert report.accuracy == pytest.approx(metrics.accuracy_score(y, p))
    assert report.macro_f1 == pytest.approx(metrics.f1_score(y, p, average="macro"))
    assert report.confusion.tolist() == metrics.confusion_matrix(y, p, labels=labels).tolist()
    precision, recall, f1, support = metrics.precision_recall_fscore_support(y, p, labels=labels, zero_division=0)
    assert report.precision == pytest.approx(precision.tolist())
    assert report.recall == pytest.approx(recall.tolist())
    assert report.f1 == pytest.approx(f1.tolist())
    assert report.support == support.tolist()


def test_report_rejects_bad_labels_and_names() -> None:
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 3\)"):
        classification_report(torch.tensor([0, 1]), torch.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match="class_names has 2 names but the model has 3 classes"):
        classification_report(torch.tensor([0]), torch.tensor([0]), 3, class_names=["a", "b"])


def test_evaluate_classifier_matches_direct_computation_and_restores_mode() -> None:
    model = _mlp().train()
    x, y = torch.randn(70, 48), torch.randint(0, 5, (70,))
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    report = evaluate_classifier(model, loader, class_names=list("abcde"), progress=False)
    model.eval()
    expected = classification_report(model(x).argmax(1), y, 5)
    assert model.training is False and report.num_samples == 70
    assert report.accuracy == expected.accuracy and torch.equal(report.confusion, expected.confusion)
    assert [row["class"] for row in report.to_dict()["per_class"]] == list("abcde")
    assert report.agreement(expected) == 1.0


def test_evaluate_classifier_and_post_training_read_pyg_batches(tmp_path: Path) -> None:
    data = pytest.importorskip("torch_geometric.data")

    class GraphMean(nn.Module):  # mean of node features per graph, then a linear head
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)

        def forward(self, batch: data.Batch) -> torch.Tensor:
            pooled = torch.zeros(batch.num_graphs, 4).index_add_(0, batch.batch, batch.x)
            return self.head(pooled / torch.bincount(batch.batch)[:, None])

    torch.manual_seed(0)
    edges = torch.tensor([[0], [1]])
    graphs = [data.Data(x=torch.randn(n, 4), edge_index=edges, y=torch.tensor([n % 3])) for n in range(2, 12)]
    model = GraphMean()
    batches = [data.Batch.from_data_list(graphs[i : i + 4]) for i in range(0, 10, 4)]
    report = evaluate_classifier(model, batches, progress=False)
    expected = torch.cat([model(b).argmax(1) for b in batches])
    assert report.num_samples == 10 and torch.equal(report.predictions, expected)

    with pytest.raises(TypeError, match="pass forward="):
        evaluate_classifier(model, [{"tokens": torch.zeros(2)}], progress=False)

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no export is attempted, so none fails
        summary = post_training(model, batches, tmp_path, batches[0], prune_amounts=(0.5,), progress=False)
    assert all(summary[key] == {"skipped": NOT_TENSORS_REASON} for key in ("torchscript", "torch_export", "onnx"))
    assert summary["evaluation"]["num_samples"] == 10 and len(summary["pruning"]) == 1


def test_plots_and_json_are_written(tmp_path: Path) -> None:
    predictions, targets = torch.tensor([0, 1, 2, 2, 1]), torch.tensor([0, 1, 2, 1, 1])
    report = classification_report(predictions, targets, 3, ["cat", "dog", "emu"])
    rows = [
        {
            "epoch": e,
            "train_loss": 1.0 / e,
            "train_acc": 0.5 + 0.1 * e,
            "lr": 0.1 * 0.5**e,
            **({"val_loss": 1.2 / e} if e % 2 else {}),
        }  # validation every other epoch
        for e in range(1, 5)
    ]
    for path in (plot_confusion_matrix(report, tmp_path / "cm.png"), plot_curves(rows, tmp_path / "curves.png")):
        assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 5_000
    written = write_json(report.to_dict(), tmp_path / "sub" / "report.json")
    assert json.loads(written.read_text())["confusion_matrix"] == [[1, 0, 0], [0, 2, 1], [0, 0, 1]]
    assert not list(tmp_path.glob("**/*.part"))

    with pytest.raises(ValueError, match="x-axis key 'step'"):
        plot_curves(rows, tmp_path / "x.png", x="step")
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_curves([{"epoch": 1, "seconds": 3.0}], tmp_path / "x.png")


def test_curves_on_a_log_scale_when_they_span_decades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss falling over decades (a regression to 1e-9) is drawn on a log scale, a loss
    within one decade or one that reaches 0 on a linear one."""
    from matplotlib.axes import Axes

    scaled: list[Axes] = []
    real = Axes.set_yscale
    monkeypatch.setattr(Axes, "set_yscale", lambda ax, value, **kw: (scaled.append(ax), real(ax, value, **kw)))
    regression = [{"epoch": e, "train_loss": 10.0**-e, "lr": 1e-3} for e in range(1, 10)]
    plot_curves(regression, tmp_path / "regression.png")
    assert [ax.get_title() for ax in scaled] == ["loss"]
    scaled.clear()
    classifier = [{"epoch": e, "train_loss": 1.0 / e, "lr": 0.1 * (4 - e) / 3} for e in range(1, 5)]  # lr ends at 0
    plot_curves(classifier, tmp_path / "classifier.png")
    assert scaled == []


@pytest.mark.parametrize("export", [export_torchscript, export_program], ids=["torchscript", "torch_export"])
def test_exports_round_trip_resnet20(export, resnet20: nn.Module, tmp_path: Path) -> None:
    x = torch.randn(2, 3, 32, 32)
    resnet20.train()
    result = export(resnet20, x, tmp_path / ("model.pt2" if export is export_program else "model.pt"))
    assert resnet20.training  # the mode is restored
    assert result.max_abs_diff <= 1e-5 and Path(result.path).stat().st_size == result.size_bytes
    resnet20.eval()
    if export is export_torchscript:
        with pytest.warns(FutureWarning):  # torch.jit.load itself is deprecated in torch 2.14
            loaded = torch.jit.load(result.path)
    else:
        loaded = torch.export.load(result.path).module()
    x5 = torch.randn(5, 3, 32, 32)  # a batch size the export never saw
    torch.testing.assert_close(loaded(x5), resnet20(x5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("export", [export_torchscript, export_program], ids=["torchscript", "torch_export"])
def test_exports_round_trip_mlp(export, tmp_path: Path) -> None:
    result = export(_mlp(), torch.randn(3, 48), tmp_path / ("mlp.pt2" if export is export_program else "mlp.pt"))
    assert result.max_abs_diff <= 1e-5


@pytest.mark.parametrize("export", [export_torchscript, export_program], ids=["torchscript", "torch_export"])
@pytest.mark.parametrize("name", ["moe_vit", "moe_encoder"])
def test_moe_models_export_their_logits(export, name: str, tmp_path: Path) -> None:
    # traced, the experts run densely (no data-dependent shapes); eager keeps the sparse dispatch
    torch.manual_seed(0)
    model = zoo.load(
        name,
        pretrained=False,
        num_classes=3,
        num_layers=2,
        hidden_size=32,
        intermediate_size=48,
        num_heads=2,
        num_kv_heads=2,
        **({"vocab_size": 64} if name == "moe_encoder" else {}),
    ).eval()
    make = (lambda n: torch.randn(n, 1, 28, 28)) if name == "moe_vit" else (lambda n: torch.randint(0, 64, (n, 12)))
    result = export(model, make(2), tmp_path / ("m.pt2" if export is export_program else "m.pt"))
    assert result.max_abs_diff <= 1e-5
    if export is export_torchscript:
        with pytest.warns(FutureWarning):
            loaded = torch.jit.load(result.path)
    else:
        loaded = torch.export.load(result.path).module()
    x = make(7)  # new batch size, new routing
    torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)


def test_export_catches_a_baked_batch_size(tmp_path: Path) -> None:
    class FixedBatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x[: int(x.shape[0])])  # the tracer records the size as a constant

    with pytest.raises(ExportMismatchError, match="differs from eager"):
        export_torchscript(FixedBatch(), torch.randn(2, 4), tmp_path / "m.pt")
    with pytest.raises(ValueError, match="at least 2 samples"):
        export_program(FixedBatch(), torch.randn(1, 4), tmp_path / "m.pt2")
    with pytest.raises(ValueError, match="ending in .pt2"):
        export_program(FixedBatch(), torch.randn(2, 4), tmp_path / "m.pt")


def test_dynamic_int8_quantization_is_close_and_smaller() -> None:
    model = _mlp(in_features=256, hidden=512, num_classes=10)
    quantized = quantize_dynamic_int8(model)
    x = torch.randn(64, 256)
    with torch.no_grad():
        reference, output = model(x), quantized(x)
    relative = ((output - reference).norm() / reference.norm()).item()
    assert relative < 0.05  # int8 weights and activations: ~2% on random data, ~100% if broken
    assert (output.argmax(1) == reference.argmax(1)).float().mean() >= 0.9
    assert state_dict_bytes(quantized) < 0.3 * state_dict_bytes(model)
    assert isinstance(model[1], nn.Linear) and type(quantized[1]) is not nn.Linear  # original untouched
    assert linear_fraction(model) == 1.0


@pytest.mark.parametrize("amount", [0.3, 0.8])
def test_global_magnitude_pruning_reaches_sparsity(amount: float, resnet20: nn.Module) -> None:
    model = copy.deepcopy(resnet20)
    sparsity = global_magnitude_prune(model, amount)
    assert sparsity == pytest.approx(amount, abs=1e-4) and weight_sparsity(model) == sparsity
    assert not [k for k in model.state_dict() if k.endswith(("_orig", "_mask"))]  # made permanent
    assert weight_sparsity(resnet20) == 0.0
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        global_magnitude_prune(model, 1.0)


def test_post_training_writes_every_artifact(tmp_path: Path) -> None:
    model = _mlp()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 48, generator=g)
    y = torch.randint(0, 5, (96,), generator=g)  # an untrained model: only the plumbing is under test
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    summary = post_training(
        model, loader, tmp_path, x[:4], class_names=list("vwxyz"), prune_amounts=(0.5, 0.9), progress=False
    )

    assert {p.name for p in tmp_path.iterdir()} == {
        "eval_report.json",
        "confusion_matrix.png",
        "model.torchscript.pt",
        "model.pt2",
        "model.onnx",
        "post_training.json",
    }
    assert json.loads((tmp_path / "post_training.json").read_text()) == summary
    assert summary["torchscript"]["max_abs_diff"] <= 1e-5 and summary["torch_export"]["max_abs_diff"] <= 1e-5
    assert summary["onnx"]["max_abs_diff"] <= 1e-4
    quant = summary["quantization"]
    assert quant["method"] == "dynamic (Linear layers)"
    assert quant["size_bytes_after"] < quant["size_bytes_before"] / 3 and 0.0 <= quant["agreement"] <= 1.0
    assert [row["sparsity"] for row in summary["pruning"]] == pytest.approx([0.5, 0.9], abs=1e-3)
    assert summary["evaluation"]["accuracy"] == evaluate_classifier(model, loader, progress=False).accuracy
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_post_training_records_a_failed_export(tmp_path: Path) -> None:
    class NoTrace(nn.Module):  # data-dependent output shape: neither exporter can capture it
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x[: int((x[:, 0] > -100).sum())])

    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with pytest.warns(UserWarning) as warned:
        summary = post_training(NoTrace(), [(x, y)], tmp_path, x[:2], prune_amounts=(), progress=False)
    assert sorted(str(w.message).split(" failed")[0] for w in warned) == [
        "post-training step 'torch_export'",
        "post-training step 'torchscript'",
    ]
    assert summary["onnx"]["max_abs_diff"] <= 1e-4  # the dynamo ONNX exporter keeps the data-dependent slice
    assert summary["torchscript"]["error"].startswith("ExportMismatchError")
    assert "error" in summary["torch_export"] and summary["pruning"] == []


def test_post_training_quantizes_a_cnn_statically_and_skips_onnx_without_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CNN family gets static int8 (zoo.optimize's PT2E path) calibrated on the given batches,
    with its accuracy against fp32 and its measured speed; a missing ONNX extra is a skip."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 3)
    ).eval()
    model.pretrained_cfg = {"architecture": "resnet20"}  # optimize's int8 covers the CNN families
    x = torch.randn(40, 1, 8, 8)
    y = model(x).argmax(1).detach()  # labels the fp32 model gets right: accuracy 1.0
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    summary = post_training(
        model,
        DataLoader(TensorDataset(x, y), batch_size=16),
        tmp_path,
        x[:16],
        calibration=[x[:16], x[16:32]],
        prune_amounts=(),
        progress=False,
    )
    assert "pip install 'zoo[onnx]'" in summary["onnx"]["skipped"] and not (tmp_path / "model.onnx").exists()
    quant = summary["quantization"]
    assert quant["method"] == "static (PT2E, x86 inductor)" and quant["calibration_samples"] == 32
    assert quant["agreement"] >= 0.9 and quant["accuracy"] >= 0.9 and quant["speedup_over_fp32_eager"] > 0
