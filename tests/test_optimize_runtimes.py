"""ONNX Runtime and OpenVINO as `zoo.optimize` candidates (`zoo.deploy.runtimes`): each runs any
batch size and returns a tensor that agrees with fp32 eager on real Fashion-MNIST images, auto
measures them with the others and keeps the fastest that passes, and a runtime that is not
installed is listed with the extra to install. Tests of a runtime skip where it is not installed
(the ``onnx`` and ``openvino`` extras; ``dev`` has both)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import zoo
from zoo.deploy import inference, optimize_report, runtimes
from zoo.errors import InvalidArgumentError
from zoo.training.data.builtin import load_fashion_mnist

BATCH = 8
INSTALLED = [name for name in runtimes.RUNTIMES if runtimes.missing(name) is None]


def _skip_unless_installed(name: str) -> None:
    if runtimes.missing(name) is not None:
        pytest.skip(runtimes.missing(name))


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    """384 Fashion-MNIST test images through resnet20.fmnist's preprocessing."""
    pixels, _ = load_fashion_mnist("test")
    return zoo.transforms(zoo.load("resnet20.fmnist"))(pixels[:384, None])


@pytest.mark.parametrize("name", runtimes.RUNTIMES)
def test_a_runtime_candidate_agrees_with_fp32_and_runs_any_batch_size(name, images):
    _skip_unless_installed(name)
    model = zoo.load("resnet20.fmnist")
    calibration, held_out = list(images[:256].split(64)), images[256:]
    optimized = zoo.optimize(model, images[:BATCH], name, calibration, cache=False, repeats=1)
    report = optimized.optimize_report
    eager, chosen = report.candidates[:2]
    assert report.precision == name and chosen.name == name and chosen.passed, str(report)
    assert report.speedup == pytest.approx(eager.median_s / chosen.median_s)  # the report's own medians
    with torch.no_grad():
        expected, actual = model(held_out), optimized(held_out)  # 128 images it was not calibrated on
        assert type(actual) is torch.Tensor and actual.dtype == torch.float32
        agreement = (actual.argmax(1) == expected.argmax(1)).float().mean().item()
        if name.endswith("-int8"):
            assert agreement >= 0.97, agreement
        else:
            assert agreement == 1.0
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        for size in (1, BATCH, 13, 0):  # the exported / converted model has a dynamic batch
            assert optimized(images[:size]).shape == (size, 10)
    assert list(optimized.state_dict()) == [f"model.{k}" for k in model.state_dict()]
    with pytest.raises(InvalidArgumentError, match="inference only"):
        optimized.train()


@pytest.mark.skipif(not INSTALLED, reason="neither ONNX Runtime nor OpenVINO is installed")
def test_auto_times_the_runtimes_in_its_final_round_and_keeps_the_fastest_that_passes(images, monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_HOME", str(tmp_path))
    # of torch's candidates only eager (the reference), to stay under half a minute on 2 cores:
    # tests/test_optimize.py measures all of them, benchmarks/inference.py all of them with the runtimes
    real_candidates = inference._candidates

    def eager_only(*args):
        available, unavailable = real_candidates(*args)
        left_out = {name: "left out by this test" for name in available if name != "eager"}
        return {"eager": available["eager"]}, {**unavailable, **left_out}

    monkeypatch.setattr(inference, "_candidates", eager_only)
    rounds: list[int] = []
    real_medians = inference.medians
    monkeypatch.setattr(
        inference, "medians", lambda runs, *a, **k: rounds.append(len(runs)) or real_medians(runs, *a, **k)
    )
    model = zoo.load("resnet20.fmnist")
    calibration = list(images[:128].split(64))
    optimized = zoo.optimize(model, images[:BATCH], calibration=calibration, repeats=2, time_budget_s=None)
    report = optimized.optimize_report
    ran = {c.name: c for c in report.candidates if c.median_s is not None}
    assert set(INSTALLED) <= set(ran), str(report)
    passed = [c for c in ran.values() if c.passed]
    assert rounds[-1] == len(passed)  # the final round timed eager and every candidate that passed, together
    eager = ran["eager"]
    for c in passed:
        assert c.speedup == pytest.approx(eager.median_s / c.median_s)
    assert report.precision == min(passed, key=lambda c: c.median_s).name
    assert report.speedup == pytest.approx(max(c.speedup for c in passed))
    with torch.no_grad():
        assert type(optimized(images[:3])) is torch.Tensor

    built = []  # a second call builds only the remembered choice
    real_build = inference._build
    monkeypatch.setattr(inference, "_build", lambda name, *a: built.append(name) or real_build(name, *a))
    again = zoo.optimize(model, images[:BATCH], calibration=calibration, repeats=1)
    assert again.optimize_report.cached and again.optimize_report.precision == report.precision
    assert built == ([] if report.precision == "eager" else [report.precision])
    assert again.optimize_report.speedup == pytest.approx(report.speedup)


def test_a_runtime_that_is_not_installed_is_listed_with_its_extra_and_not_picked(monkeypatch):
    for module in ("openvino", "nncf", "onnxruntime"):
        monkeypatch.setitem(sys.modules, module, None)  # what find_spec reports for a package not installed
    available, unavailable = runtimes.candidates((torch.randn(2, 4),), torch.device("cpu"), include=True)
    assert not available and set(unavailable) == set(runtimes.RUNTIMES)
    assert "pip install 'zoo[openvino]'" in unavailable["openvino-int8"]
    assert "pip install 'zoo[onnx]'" in unavailable["onnxruntime"]
    model = nn.Sequential(nn.Linear(4, 3)).eval()
    with pytest.raises(InvalidArgumentError, match=r"'openvino' does not apply here: openvino needs openvino"):
        zoo.optimize(model, torch.randn(2, 4), "openvino")
    optimized = zoo.optimize(model, torch.randn(4, 4), "fp32", cache=False, repeats=1)
    notes = {c.name: c.note for c in optimized.optimize_report.candidates}
    assert "pip install 'zoo[openvino]'" in notes["openvino"]


def test_runtimes_false_leaves_them_out_and_says_so_and_changes_the_cache_key():
    args = (torch.randn(2, 1, 28, 28),)
    available, unavailable = runtimes.candidates(args, torch.device("cpu"), include=False)
    assert not available
    for name in INSTALLED:
        assert "runtimes=False" in unavailable[name]
    model = zoo.load("resnet20.fmnist")
    report = optimize_report.OptimizeReport("eager", 1.0, [], "AVX512", False, "cpu")
    with_runtimes = inference._cache_key(
        model, args, torch.device("cpu"), report, {"eager": None, **dict.fromkeys(INSTALLED)}
    )
    without = inference._cache_key(model, args, torch.device("cpu"), report, {"eager": None})
    assert (with_runtimes != without) == bool(INSTALLED)


def test_a_model_whose_output_is_not_one_tensor_is_refused_by_name():
    _skip_unless_installed("onnxruntime")

    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + 1, x * 2

    with pytest.raises(InvalidArgumentError, match="candidates return one tensor per call; Pair returns tuple"):
        zoo.optimize(Pair(), torch.randn(2, 4), "onnxruntime", cache=False, repeats=1)


def test_inputs_that_are_not_batched_tensors_are_not_runtime_candidates():
    available, unavailable = runtimes.candidates((torch.randn(2, 4), 3), torch.device("cpu"), include=True)
    assert not available and "tensor inputs with a batch dimension" in unavailable["onnxruntime"]


def test_zoo_bench_peers_prints_every_candidate_optimize_measured(monkeypatch, capsys):
    """``zoo bench --peers``: the candidates of each row's optimize report side by side (here a
    stand-in report with fixed figures), the chosen one marked and the ones not run with why."""
    from zoo.cli import main
    from zoo.deploy import bench

    candidates = [
        optimize_report.Candidate("eager", 0.004, 1.0, 1.0, 0.0, passed=True),
        optimize_report.Candidate("openvino-int8", 0.001, 4.0, 0.995, 0.3, passed=True),
        optimize_report.Candidate("onnxruntime-int8", 0.0008, 5.0, 0.97, 0.9, note="top-1 agreement 97.00% ..."),
        optimize_report.Candidate("openvino", note="openvino needs openvino: pip install 'zoo[openvino]'"),
    ]

    def stand_in(model: nn.Module, example_input: torch.Tensor) -> nn.Module:
        wrapped = inference.OptimizedModel(model, model)
        wrapped.optimize_report = optimize_report.OptimizeReport("openvino-int8", 4.0, candidates, "AVX2", False, "cpu")
        return wrapped

    monkeypatch.setattr(bench, "optimize_model", stand_in)  # measure() runs it
    assert main(["bench", "dbn.fmnist", "--batch", "2", "--repeats", "1", "--peers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("every candidate zoo.optimize measured") + 1 :]
    assert table[0].split() == ["model", "batch", "candidate", "ms", "speed-up", "top-1", "agreement", "status"]
    assert table[2].split() == ["dbn.fmnist", "2", "openvino-int8", "1", "4.00", "99.50%", "chosen"]
    assert "not used: top-1 agreement 97.00%" in table[3] and "pip install 'zoo[openvino]'" in table[4]
    assert main(["bench", "dbn.fmnist", "--peers", "--no-optimize"]) == 2
    assert "leave out --no-optimize" in capsys.readouterr().err


RELEASED_OUT_OF_ORDER = textwrap.dedent(
    """
    import faulthandler, gc, signal, subprocess
    import torch, torch.nn as nn
    from zoo.deploy import runtimes

    faulthandler.enable()  # an alternate signal stack, as pytest and many servers have
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handled SIGCHLD, as under torch's DataLoader
    model, conversion = nn.Sequential(nn.Linear(8, 4)).eval(), runtimes.Conversion("openvino")
    first = runtimes.build_runtime("openvino", model, (torch.randn(2, 8),), [], conversion)
    second = runtimes.build_runtime("openvino", model, (torch.randn(2, 8),), [], conversion)
    del first; gc.collect()
    del second; gc.collect()
    subprocess.run(["true"], check=True)  # its exit signals this process
    print("lived")
    """
)


def test_openvino_models_released_out_of_order_leave_signals_deliverable(tmp_path: Path) -> None:
    """OpenVINO's CPU plugin gives each instance a signal stack and, released out of order, left an
    unmapped one current: the next handled SIGCHLD then killed the process (SIGSEGV; it killed this
    suite's worker in CI). `runtimes.keeping_signal_stack` puts the caller's stack back."""
    _skip_unless_installed("openvino")
    script = tmp_path / "released.py"
    script.write_text(RELEASED_OUT_OF_ORDER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "lived" in done.stdout, (done.returncode, done.stderr[-3000:])
