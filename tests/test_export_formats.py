"""zoo.export and `zoo export`: ONNX through the dynamo exporter, run in onnxruntime at batch
sizes the export never saw and compared with PyTorch fp32, for one model of every family;
TorchScript and ExportedProgram through the same entry point; every bad input refused early
with one clear line."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import zoo
from zoo.cli import main
from zoo.deploy.exporter import ExportMismatchError, example_input_for
from zoo.errors import InvalidArgumentError, ZooError

TOLERANCE = 1e-4  # max abs difference from PyTorch fp32


@pytest.fixture(autouse=True)
def _two_threads() -> None:
    torch.set_num_threads(2)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An empty folder for the exports (tmp_path also holds the test's ZOO_HOME)."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def _input_dims(path: Path) -> list[list[int | str]]:
    """Each ONNX graph input's shape: sizes, or the names of symbolic dimensions."""
    graph = onnx.load(path).graph
    return [[d.dim_param or d.dim_value for d in node.type.tensor_type.shape.dim] for node in graph.input]


def _onnxruntime_max_diff(path: Path, model: nn.Module, x: torch.Tensor) -> float:
    """Run the ONNX file in a fresh onnxruntime session and return its largest difference from ``model(x)``."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        expected = model(x).numpy()
    assert output.shape == expected.shape
    return float(np.abs(output - expected).max())


def _resized(x: torch.Tensor, batch: int) -> torch.Tensor:
    """A fresh random input like ``x`` with ``batch`` samples (token ids stay in the vocabulary)."""
    if x.is_floating_point():
        return torch.rand(batch, *x.shape[1:])
    return torch.randint(0, int(x.max()) + 1, (batch, *x.shape[1:]))


def _tiny_moe_lm() -> nn.Module:
    return zoo.load(
        "moe_lm",
        pretrained=False,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=24,
        num_experts=4,
        top_k=2,
    )


MODELS = {  # one per family; the bundled weights where they exist
    "densenet_bc_40.fmnist": lambda: zoo.load("densenet_bc_40.fmnist"),
    "mobilenet_v2_cifar.fmnist": lambda: zoo.load("mobilenet_v2_cifar.fmnist"),
    "mobilenet_v3_small_cifar": lambda: zoo.load("mobilenet_v3_small_cifar", pretrained=False, in_chans=1),
    "seresnet20.fmnist": lambda: zoo.load("seresnet20.fmnist"),
    "dbn.fmnist": lambda: zoo.load("dbn.fmnist"),
    "moe_vit.fmnist": lambda: zoo.load("moe_vit.fmnist"),
    "moe_lm": _tiny_moe_lm,
}


@pytest.mark.parametrize("name", MODELS)
def test_onnx_matches_pytorch_at_new_batch_sizes(name: str, out: Path) -> None:
    torch.manual_seed(0)
    model = MODELS[name]()
    # without weights the default would be its cfg's input_size (32 px); 28 px gray, as the bundled ones
    example = torch.randn(2, 1, 28, 28) if name == "mobilenet_v3_small_cifar" else None
    result = zoo.export(model, out / "model.onnx", example_input=example)
    assert result.max_abs_diff <= TOLERANCE and Path(result.path).stat().st_size == result.size_bytes
    x = example if example is not None else example_input_for(model)
    assert _input_dims(out / "model.onnx") == [["batch", *x.shape[1:]]]
    for batch in (1, 5):  # the export checked 2 and 3
        assert _onnxruntime_max_diff(out / "model.onnx", model, _resized(x, batch)) <= TOLERANCE
    assert [p.name for p in out.iterdir()] == ["model.onnx"]  # no temporary files left


def test_default_example_inputs_follow_preprocessing_and_input_kind() -> None:
    resnet = zoo.load("resnet20", pretrained=False, in_chans=1)
    resnet.pretrained_cfg = {**resnet.pretrained_cfg, "preprocess": {"resize": 36, "crop": [32, 30]}}
    assert example_input_for(resnet, batch=3).shape == (3, 1, 32, 30)
    resnet.pretrained_cfg = {**resnet.pretrained_cfg, "preprocess": {}, "input_size": (1, 24, 20)}  # timm's key
    assert example_input_for(resnet).shape == (2, 1, 24, 20)
    ids = example_input_for(_tiny_moe_lm())
    assert ids.dtype == torch.long and ids.shape == (2, 16) and 0 <= ids.min() and ids.max() < 259
    visible = example_input_for(zoo.load("dbn", pretrained=False, sizes=(12, 8)))
    assert visible.shape == (2, 12) and 0 <= visible.min() and visible.max() <= 1


def _unsized_resnet() -> nn.Module:
    model = zoo.load("resnet20", pretrained=False)
    model.pretrained_cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ("preprocess", "input_size")}
    return model


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (_unsized_resnet, r"no preprocessing or input_size.*; pass example_input=torch\.randn\(2, 3, HEIGHT"),
        (lambda: zoo.load("gin3", pretrained=False), r"gin3 reads graphs.*cannot be exported"),
        (lambda: nn.Linear(3, 2), r"not a zoo model .* pass example_input="),
    ],
)
def test_unknown_inputs_are_refused_with_the_fix(model: Any, match: str, out: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        zoo.export(model(), out / "m.onnx")
    assert not list(out.iterdir())


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).softmax(-1)


@pytest.fixture(scope="module")
def mlp_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, Path]:
    """A small MLP and its dynamic-batch ONNX export at opset 18, shared by the tests that read it."""
    torch.manual_seed(0)
    model = _MLP().eval()
    result = zoo.export(model, tmp_path_factory.mktemp("mlp") / "mlp.onnx", example_input=torch.randn(2, 6), opset=18)
    return model, Path(result.path)


def test_onnx_opset_is_the_one_asked_for(mlp_onnx: tuple[nn.Module, Path]) -> None:
    assert {o.domain: o.version for o in onnx.load(mlp_onnx[1]).opset_import}[""] == 18


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 64), scale=st.floats(1e-3, 1e3))
def test_dynamic_batch_onnx_runs_any_batch(mlp_onnx: tuple[nn.Module, Path], batch: int, scale: float) -> None:
    model, path = mlp_onnx
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(batch, 6) * scale
    (output,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(output, model(x).numpy(), atol=TOLERANCE, rtol=1e-4)


def test_fixed_batch_onnx_refuses_other_batches(out: Path) -> None:
    model = _MLP().eval()
    result = zoo.export(model, out / "fixed.onnx", example_input=torch.randn(4, 6), dynamic_batch=False)
    assert _input_dims(Path(result.path)) == [[4, 6]]
    session = onnxruntime.InferenceSession(result.path, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="dimension"):
        session.run(None, {"x": np.zeros((5, 6), np.float32)})


@pytest.mark.parametrize(
    ("format", "file", "load"),
    [
        ("torchscript", "m.pt", lambda path: torch.jit.load(path)),
        ("exported-program", "m.pt2", lambda path: torch.export.load(path).module()),
    ],
)
def test_other_formats_through_zoo_export(format: str, file: str, load: Any, out: Path) -> None:
    model = _MLP().eval()
    result = zoo.export(model, out / file, format, example_input=torch.randn(2, 6))
    assert result.max_abs_diff <= 1e-5
    x = torch.randn(7, 6)
    with pytest.warns(FutureWarning) if format == "torchscript" else nullcontext():  # torch.jit.load is deprecated
        loaded = load(result.path)
    torch.testing.assert_close(loaded(x), model(x))


def test_destination_and_options_are_checked_before_any_work(out: Path) -> None:
    model = _MLP()
    existing = out / "old.onnx"
    existing.write_bytes(b"keep me")
    cases = [
        ({"path": existing}, r"old\.onnx already exists; pass overwrite=True"),
        ({"path": out}, r"is a folder; give the file to write, e\.g\. .*model\.onnx"),
        ({"path": existing / "m.onnx"}, r"old\.onnx is a file, not a folder"),
        ({"path": out / "m.onnx", "format": "tflite"}, r"unknown export format 'tflite'; choose one of onnx, "),
        ({"path": out / "m.pt", "format": "exported-program"}, r"ending in \.pt2.*name it m\.pt2"),
        ({"path": out / "m.pt", "format": "torchscript", "opset": 18}, r"opset applies to ONNX only"),
        ({"path": out / "m.onnx", "opset": 9}, r"opset 9 is out of reach: .* opsets 18 to \d+"),
        # even root may not create files there: the check writes a probe, not just permission bits
        ({"path": "/proc/m.onnx"}, r"cannot write /proc/m\.onnx: /proc does not take new files \(.*\); choose another"),
    ]
    for kwargs, match in cases:
        with pytest.raises(InvalidArgumentError, match=match):
            zoo.export(model, example_input=torch.randn(2, 6), **kwargs)
    assert existing.read_bytes() == b"keep me" and sorted(p.name for p in out.iterdir()) == ["old.onnx"]


def test_overwrite_replaces_the_file(out: Path) -> None:
    target = out / "m.pt"
    target.write_bytes(b"old")
    result = zoo.export(_MLP(), target, "torchscript", example_input=torch.randn(2, 6), overwrite=True)
    assert target.stat().st_size == result.size_bytes > 3


def test_missing_onnx_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript now raises ImportError
    with pytest.raises(ZooError, match=r"onnxscript is missing\): pip install 'zoo\[onnx\]'"):
        zoo.export(_MLP(), out / "m.onnx", example_input=torch.randn(2, 6))


def test_a_batch_baked_into_the_graph_is_caught(out: Path) -> None:
    class FixedBatch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[0] == 2 else x  # the exporter specializes the batch to the example's

    with pytest.raises(
        ExportMismatchError, match="could not keep the batch dimension of x dynamic.*dynamic_batch=False"
    ):
        zoo.export(FixedBatch(), out / "m.onnx", example_input=torch.randn(2, 3))
    assert not list(out.iterdir())
    result = zoo.export(FixedBatch(), out / "m.onnx", example_input=torch.randn(2, 3), dynamic_batch=False)
    assert result.max_abs_diff == 0.0


def test_cli_exports_resnet20_to_onnx(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = out / "resnet20.onnx"
    assert main(["export", "resnet20.fmnist", "--format", "onnx", "--out", str(path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"wrote {path} (onnx, ") and "any batch size" in line and "onnxruntime matches" in line
    assert _input_dims(path) == [["batch", 1, 28, 28]]
    model = zoo.load("resnet20.fmnist")
    for batch in (3, 8):
        assert _onnxruntime_max_diff(path, model, torch.randn(batch, 1, 28, 28)) <= TOLERANCE

    before = path.read_bytes()
    assert main(["export", "resnet20.fmnist", "--format", "onnx", "--out", str(path)]) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert error == f"zoo: error: {path} already exists; pass overwrite=True (--overwrite) to replace it"
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["resnet20.fmnist", "--format", "tflite"],
            "zoo: error: unknown export format 'tflite'; choose one of onnx, torchscript, exported-program",
        ),
        (
            ["resnet2.fmnist", "--format", "onnx"],
            "zoo: error: unknown model 'resnet2.fmnist'. Did you mean: resnet20.fmnist",
        ),
        (["gin3.fmnist", "--format", "onnx"], "zoo: error: gin3 reads graphs, passed as a torch_geometric Data object"),
    ],
)
def test_cli_bad_input_is_one_line(
    argv: list[str], message: str, out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", *argv, "--out", str(out / "m.onnx")]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(message) and not captured.out and not list(out.iterdir())


def test_cli_fixed_batch(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = out / "dbn.pt2"
    assert main(["export", "dbn.fmnist", "--format", "exported-program", "--batch-size", "3", "--out", str(path)]) == 0
    assert "fixed batch of 3" in capsys.readouterr().out
    program = torch.export.load(path)
    assert [tuple(spec.meta["val"].shape) for spec in program.graph.find_nodes(op="placeholder")][-1] == (3, 784)
    with pytest.raises(SystemExit):
        main(["export", "dbn.fmnist", "--format", "onnx", "--batch-size", "3", "--dynamic-batch", "--out", str(path)])


@pytest.mark.parametrize("format,file", [("exported-program", "m.pt2"), ("torchscript", "m.pt")])
def test_capacity_factor_models_get_the_fixed_batch_hint(format: str, file: str, out: Path) -> None:
    model = zoo.load(
        "moe_encoder",
        pretrained=False,
        hidden_size=32,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=24,
        num_experts=4,
        top_k=1,
        capacity_factor=1.0,
        num_classes=3,
    )
    example = torch.randint(0, 200, (2, 16))
    with pytest.raises(
        ExportMismatchError, match=r"depends on the batch size .*dynamic_batch=False \(--batch-size N\)"
    ) as error:
        zoo.export(model, out / file, format, example_input=example)
    assert "\n" not in str(error.value) and not (out / file).exists()
    result = zoo.export(
        model, out / f"fixed-{file}", format, example_input=example, dynamic_batch=False, overwrite=True
    )
    assert result.max_abs_diff <= 1e-4
