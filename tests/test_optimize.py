"""`zoo.optimize`: every candidate agrees with fp32 eager, int8 keeps top-1 on real Fashion-MNIST
images, auto remembers its choice, bad arguments are refused by name. Compiling is slow on a
small CPU, so one module-wide auto run on resnet20.fmnist (fp32 compiled + int8) serves the
candidate checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torch._inductor.utils import run_and_get_code

import zoo
from zoo.cli import main
from zoo.deploy import inference, optimize_report, search
from zoo.devices import cpu_features
from zoo.errors import InvalidArgumentError
from zoo.loading.transforms import build_transforms
from zoo.training.data.builtin import load_fashion_mnist

BF16_NATIVE = cpu_features().bf16
BATCH = 64


@pytest.fixture(scope="module")
def fmnist_batches() -> list[torch.Tensor]:
    """512 Fashion-MNIST test images through resnet20.fmnist's preprocessing, in batches of 64."""
    images, _ = load_fashion_mnist("test")
    preprocess = build_transforms({"mean": [0.5], "std": [0.5]})
    return list(preprocess(images[:512, None]).split(BATCH))


@pytest.fixture(scope="module")
def auto_run(fmnist_batches, tmp_path_factory):
    """resnet20.fmnist through precision="auto", calibrated and checked on the real images,
    with its own ZOO_HOME (returned, with the model and the optimized model)."""
    home = tmp_path_factory.mktemp("zoo_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(home))
        model = zoo.load("resnet20.fmnist")
        # the torch candidates; tests/test_optimize_runtimes.py measures ONNX Runtime and OpenVINO
        optimized = zoo.optimize(
            model, fmnist_batches[0], calibration=fmnist_batches, repeats=3, runtimes=False, time_budget_s=None
        )
    return model, optimized, home


def _ran(report: optimize_report.OptimizeReport) -> dict[str, optimize_report.Candidate]:
    return {c.name: c for c in report.candidates if c.median_s is not None}


def test_int8_from_one_image_runs_every_batch_size(fmnist_batches):
    """A latency example of one image, calibration on 16, then a last partial batch: each size
    runs (export captures the batch as dynamic; each size compiles its own graph)."""
    model = zoo.load("resnet20.fmnist")
    images = fmnist_batches[0]
    optimized = zoo.optimize(model, images[:1], "int8", calibration=images[:16], repeats=1)
    with torch.no_grad():
        for size in (1, 16, 5):
            agree = (optimized(images[:size]).argmax(1) == model(images[:size]).argmax(1)).float().mean()
            assert agree >= 0.8, (size, agree)


def test_every_candidate_matches_fp32_and_int8_keeps_top1_on_real_images(auto_run, fmnist_batches):
    model, optimized, _ = auto_run
    ran = _ran(optimized.optimize_report)
    expected = {"eager", "channels_last", "fp32", "int8"} | ({"bf16"} if BF16_NATIVE else set())
    assert set(ran) == expected
    assert ran["fp32"].max_abs_diff < 1e-3 and ran["channels_last"].max_abs_diff < 1e-3
    assert ran["fp32"].top1_agreement == ran["channels_last"].top1_agreement == 1.0
    assert ran["int8"].top1_agreement >= 0.99, f"int8 top-1 agreement on 512 images: {ran['int8'].top1_agreement}"
    if BF16_NATIVE:  # not measured yet (no such CPU in this session): a loose check that bf16 is not broken
        assert ran["bf16"].top1_agreement >= 0.98
    report = optimized.optimize_report
    assert report.cpu_capability == cpu_features().capability and report.device == "cpu"
    assert "bf16" in {c.name for c in report.candidates if c.median_s is None} or BF16_NATIVE
    with torch.no_grad():  # the chosen path, called as users call it, on a batch it was checked on
        expected, actual = model(fmnist_batches[1]), optimized(fmnist_batches[1])
    scale = expected.abs().max().item()
    assert (actual - expected).abs().max().item() <= inference.RELATIVE_TOLERANCE[report.precision] * scale
    assert (actual.argmax(-1) == expected.argmax(-1)).float().mean() >= 0.98


def test_auto_keeps_the_fastest_passing_candidate_and_reuses_its_cache(auto_run, fmnist_batches, monkeypatch):
    model, optimized, home = auto_run
    report = optimized.optimize_report
    chosen = next(c for c in report.candidates if c.name == report.precision)
    # by speed-up: each candidate against eager timed in turn with it, which a change in load cannot skew
    assert chosen.passed and chosen.speedup == max(c.speedup for c in report.candidates if c.passed)
    assert report.speedup == pytest.approx(chosen.speedup) and report.speedup >= 1.0
    cached = json.loads((home / optimize_report.CACHE_FILE).read_text())
    assert cached[report.cache_key]["precision"] == report.precision

    built = []
    real_build = inference._build
    monkeypatch.setattr(inference, "_build", lambda name, *args: built.append(name) or real_build(name, *args))
    monkeypatch.setenv("ZOO_HOME", str(home))
    again = zoo.optimize(model, fmnist_batches[0], calibration=fmnist_batches, repeats=1, runtimes=False)
    assert again.optimize_report.cached and again.optimize_report.precision == report.precision
    assert built == ([] if report.precision == "eager" else [report.precision])


def test_optimized_model_keeps_the_models_attributes_and_refuses_training(auto_run):
    model, optimized, _ = auto_run
    assert optimized.num_classes == 10 and optimized.pretrained_cfg == model.pretrained_cfg
    assert not optimized.training and list(optimized.state_dict()) == [f"model.{k}" for k in model.state_dict()]
    with pytest.raises(InvalidArgumentError, match="inference only"):
        optimized.train()


@pytest.mark.skipif(BF16_NATIVE, reason="this CPU runs bf16 natively: the auto run above measured it")
def test_bf16_on_a_cpu_without_native_bf16_is_refused_by_name():
    model = zoo.load("resnet20.fmnist")
    with pytest.raises(
        InvalidArgumentError, match=r"precision='bf16' does not apply here: .*does not run bf16 natively"
    ):
        zoo.optimize(model, torch.randn(2, 1, 28, 28), "bf16")


def test_bad_arguments_are_refused_by_name():
    model = zoo.load("resnet20.fmnist")
    x = torch.randn(2, 1, 28, 28)
    with pytest.raises(InvalidArgumentError, match=r"precision='fp8' is not one of 'auto', 'fp32'"):
        zoo.optimize(model, x, "fp8")
    with pytest.raises(InvalidArgumentError, match="optimize needs example_input"):
        zoo.optimize(model, None)
    with pytest.raises(InvalidArgumentError, match="optimize needs example_input"):
        zoo.load("resnet20.fmnist", optimize="fp32")
    with pytest.raises(InvalidArgumentError, match=r"example_input= and calibration= are for optimize="):
        zoo.load("resnet20.fmnist", example_input=x)
    with pytest.raises(InvalidArgumentError, match="calibration is empty"):
        zoo.optimize(model, x, calibration=[])
    for bad in (0, 1.5, True):
        with pytest.raises(InvalidArgumentError, match=f"max_batch_graphs must be an int of 1 or more, got {bad}"):
            zoo.optimize(model, x, max_batch_graphs=bad)
    with pytest.raises(InvalidArgumentError, match="fp16 runs on a CUDA GPU"):
        zoo.optimize(model, x, "fp16")
    with pytest.raises(InvalidArgumentError, match="int8 quantization applies to the CNN image families"):
        zoo.optimize(zoo.load("dbn.fmnist"), torch.rand(2, 784), "int8")


@settings(max_examples=20)
@given(shape=st.lists(st.integers(1, 30), min_size=1, max_size=4))
def test_calibration_of_another_shape_names_the_batch_and_both_shapes(shape):
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    x = torch.randn(2, 1, 28, 28)
    calibration = [x, torch.randn(3, *shape)]
    if shape == [1, 28, 28]:
        return
    with pytest.raises(
        InvalidArgumentError, match=r"calibration batch 1 has shape \(3, .*example_input has shape \(2, 1, 28, 28\)"
    ):
        zoo.optimize(model, x, "fp32", calibration)


def test_load_with_optimize_fp32_on_vectors_matches_eager():
    x = torch.rand(16, 784)
    optimized = zoo.load("dbn.fmnist", optimize="fp32", example_input=x)
    report = optimized.optimize_report
    assert report.precision == "fp32" and [c.name for c in report.candidates if c.median_s] == ["eager", "fp32"]
    assert "int8 quantization applies to the CNN image families" in {c.name: c.note for c in report.candidates}["int8"]
    with torch.no_grad():
        torch.testing.assert_close(optimized(x), zoo.load("dbn.fmnist")(x), rtol=1e-4, atol=1e-5)


def test_a_damaged_or_unwritable_cache_file_is_ignored(zoo_home):
    (zoo_home / optimize_report.CACHE_FILE).mkdir(parents=True)  # neither readable as JSON nor replaceable
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4)).eval()
    optimized = zoo.optimize(model, torch.randn(4, 8), repeats=1)
    assert not optimized.optimize_report.cached and (zoo_home / optimize_report.CACHE_FILE).is_dir()
    assert optimized(torch.ones(4, 8)).shape == (4, 4)


def test_predict_with_optimize_prints_what_eager_prints(tmp_path, capsys):
    images = []
    for index in range(5):
        path = tmp_path / f"{index}.png"
        Image.fromarray(torch.randint(0, 256, (28, 28), dtype=torch.uint8).numpy()).save(path)
        images.append(str(path))
    assert main(["predict", "resnet20.fmnist", *images, "--topk", "3"]) == 0
    eager = capsys.readouterr().out
    assert main(["predict", "resnet20.fmnist", *images, "--topk", "3", "--batch-size", "2"]) == 0
    assert capsys.readouterr().out == eager
    # batches of 2, 2 and a last one of 1, padded onto the graph compiled for 2
    assert main(["predict", "resnet20.fmnist", *images, "--topk", "3", "--optimize", "fp32", "--batch-size", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out == eager and "zoo predict" in captured.err  # a progress bar over the batches...
    assert "Warning" not in captured.err and "CUDA" not in captured.err  # ...and none of torch's compile chatter
    if not BF16_NATIVE:
        assert main(["predict", "resnet20.fmnist", *images, "--optimize", "bf16"]) == 2
        assert "zoo: error: precision='bf16' does not apply here" in capsys.readouterr().err
    assert main(["predict", "resnet20.fmnist", *images, "--optimize", "fp16"]) == 2  # a choice, for --device cuda
    assert "zoo: error: precision='fp16' does not apply here: fp16 runs on a CUDA GPU" in capsys.readouterr().err


def test_fp32_folds_batchnorm_into_the_convolution_and_fuses_the_relu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 16, 16)
    output, sources = run_and_get_code(inference._build("fp32", model, (x,), [(x,)], None), x)
    code = "\n".join(sources)
    assert "sqrt" not in code and "batch_norm" not in code  # the BatchNorm's arithmetic is in the frozen weight
    assert code.count("_convolution_pointwise") == 1 and "'relu'" in code
    with torch.no_grad():
        torch.testing.assert_close(output, model(x), rtol=1e-4, atol=1e-5)


def test_cache_key_names_machine_model_shape_and_torch(auto_run):
    key = auto_run[1].optimize_report.cache_key
    for part in (cpu_features().capability, "resnet20.fmnist", "(64, 1, 28, 28)", torch.__version__):
        assert part in key
    assert Path(auto_run[2], optimize_report.CACHE_FILE).is_file()


def _tiny_cnn() -> nn.Module:
    """A small convolutional classifier that optimize treats as a CNN family (it compiles fast)."""
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)
    ).eval()
    model.pretrained_cfg = {"architecture": "resnet20"}  # a CNN family: its spec has int8
    return model


def test_a_cnn_compiles_its_first_batch_sizes_and_pads_the_others_onto_them():
    torch.manual_seed(0)
    model = _tiny_cnn()
    optimized = zoo.optimize(
        model,
        torch.randn(4, 1, 8, 8),
        "fp32",
        calibration=torch.randn(7, 1, 8, 8),
        cache=False,
        repeats=1,
        max_batch_graphs=2,
    )
    assert optimized.graph_batch_sizes == [4]  # calibration's last batch of 3 was padded, not compiled
    with torch.no_grad():
        for size, graphs in ((3, [4, 3]), (9, [4, 3]), (1, [4, 3]), (4, [4, 3]), (0, [4, 3])):
            x = torch.randn(size, 1, 8, 8)
            torch.testing.assert_close(optimized(x), model(x), rtol=1e-4, atol=1e-5)
            assert optimized.graph_batch_sizes == graphs


def test_dynamos_recompile_limit_shared_by_a_class_does_not_push_a_second_model_back_to_eager():
    """Every nn.Sequential shares one forward code object, and dynamo's recompile limit counts
    its graphs across instances; zoo bounds its own graphs and lifts that limit for them."""
    import torch._dynamo.config
    from torch._dynamo.utils import counters

    x = torch.randn(2, 1, 8, 8)
    with torch._dynamo.config.patch(recompile_limit=1):  # (monkeypatch.setattr breaks dynamo's config module)
        first = zoo.optimize(_tiny_cnn(), x, "fp32", cache=False, repeats=1)
        graphs = counters["stats"]["unique_graphs"]
        second = zoo.optimize(_tiny_cnn(), x, "fp32", cache=False, repeats=1)
        assert counters["stats"]["unique_graphs"] == graphs + 1  # compiled, not run eagerly past the limit
    with torch.no_grad():
        torch.testing.assert_close(second(x), second.model(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(first(x), first.model(x), rtol=1e-4, atol=1e-5)


def test_the_pick_agrees_with_the_reports_own_medians() -> None:
    """From fixed timings: the fastest passing candidate wins, and every speed-up is eager's
    median over the candidate's, so the report cannot contradict itself."""
    from zoo.deploy.inference import pick
    from zoo.deploy.optimize_report import Candidate

    candidates = [
        Candidate("eager", median_s=0.0236, speedup=1.0, passed=True),
        Candidate("bf16", median_s=0.0120, speedup=36.75, passed=True),  # a stale pairwise figure
        Candidate("int8", median_s=0.0041, speedup=2.0, passed=True),
        Candidate("fp32", median_s=0.0030, speedup=9.0, passed=False, note="disagrees"),
    ]
    chosen = pick(candidates)
    assert chosen.name == "int8"
    for c in candidates[:3]:
        assert c.speedup == pytest.approx(0.0236 / c.median_s)
    assert max((c for c in candidates if c.passed), key=lambda c: c.speedup) is chosen


def test_a_budgeted_search_stops_when_the_budget_is_spent_and_remembers_apart(monkeypatch, zoo_home) -> None:
    """Fixed measurements: the budget lets two candidates in; the rest are reported as not
    tried, the pick is the faster of those two, and a full search does not take the budgeted
    choice from the cache (a budgeted one takes a full search's)."""
    model = _tiny_cnn()
    x = torch.randn(4, 1, 8, 8)
    medians_s = {"int8": 0.002, "fp32": 0.004, "channels_last": 0.003}
    real_candidates = inference._candidates
    monkeypatch.setattr(
        inference,
        "_candidates",
        lambda *a: ({"eager": None, **dict.fromkeys(medians_s)}, real_candidates(*a)[1]),
    )
    measured: list[str] = []

    def fixed(trials, name):
        measured.append(name)
        trials.built[name] = trials.built["eager"]
        trials.paired_eager_s[name] = trials.eager.median_s = 0.008
        return optimize_report.Candidate(name, medians_s[name], 0.008 / medians_s[name], 1.0, 0.0, passed=True)

    monkeypatch.setattr(inference._Trials, "_measured", fixed)
    monkeypatch.setattr(inference._Trials, "final_round", lambda *a: None)  # the fixed medians stand
    allowed = iter([None, None])
    monkeypatch.setattr(
        search, "left_untried", lambda *a: next(allowed, "not tried: budget") if a[-1] is not None else None
    )
    monkeypatch.setattr(search.Machine, "here", classmethod(lambda cls, device: search.Machine("cpu", "AVX2")))
    report = zoo.optimize(model, x, runtimes=False, time_budget_s=60).optimize_report
    assert measured == ["int8", "fp32"]  # int8 first on an AVX2 CPU, then compiled fp32
    assert [c.note[:9] for c in report.candidates if c.name == "channels_last"] == ["not tried"]
    assert report.precision == "int8" and not report.cached
    measured.clear()
    full = zoo.optimize(model, x, runtimes=False, time_budget_s=None).optimize_report
    assert not full.cached and sorted(measured) == ["channels_last", "fp32", "int8"]
    again = zoo.optimize(model, x, runtimes=False).optimize_report  # the full search's choice serves the budgeted call
    assert again.cached and again.candidates == full.candidates


@pytest.mark.parametrize("budget", [0, -1, float("nan"), float("inf"), 1e12])
def test_a_time_budget_out_of_range_is_refused(budget) -> None:
    with pytest.raises(InvalidArgumentError, match="time_budget_s"):
        zoo.optimize(_tiny_cnn(), torch.randn(2, 1, 8, 8), time_budget_s=budget)


def test_a_model_with_nan_weights_is_refused_before_any_candidate() -> None:
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
    with torch.no_grad():
        model.get_classifier().weight.fill_(float("nan"))
    with pytest.raises(InvalidArgumentError, match=r"own fp32 outputs on the example .* are NaN or infinite"):
        zoo.optimize(model, torch.zeros(1, 1, 28, 28), runtimes=False)
