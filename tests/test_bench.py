"""`zoo.deploy.bench`: MACs counted against hand computation and torchvision's published figures, every
weight entry's recorded ``gmacs`` against a fresh count, and the `zoo bench` command."""

from __future__ import annotations

import csv
import functools
import json

import pytest
import torch
import torch.nn as nn
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from published import publish

import zoo
from zoo.cli import bench_command as cli_bench
from zoo.cli import main
from zoo.deploy import bench
from zoo.devices import cpu_features
from zoo.store import weight_entries
from zoo.training.recipes import publish as recipes_publish
from zoo.training.recipes.publish import Provenance
from zoo.training.recipes.publish import publish as publish_entry

CSV_COLUMNS = {
    "model",
    "top1",
    "param_count",
    "gmacs",
    "input_shape",
    "file_size_mb",
    "batch_size",
    "infer_samples_per_sec",
    "infer_step_time_ms",
    "optimized_samples_per_sec",
    "optimized_precision",
}


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    groups=st.sampled_from([1, 2]),
    in_per_group=st.integers(1, 3),
    out_per_group=st.integers(1, 3),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    size=st.integers(3, 9),
    features=st.integers(1, 5),
)
def test_count_macs_of_a_conv_and_a_linear_by_hand(
    batch, groups, in_per_group, out_per_group, kernel, stride, size, features
):
    conv = nn.Conv2d(groups * in_per_group, groups * out_per_group, kernel, stride=stride, groups=groups)
    out_size = (size - kernel) // stride + 1
    flat = groups * out_per_group * out_size**2
    model = nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.Linear(flat, features))
    # each output of the conv: a dot product over its group's in-channels times the kernel area
    conv_macs = batch * flat * in_per_group * kernel**2
    assert (
        bench.count_macs(model, torch.randn(batch, groups * in_per_group, size, size))
        == conv_macs + batch * flat * features
    )


@pytest.mark.parametrize(
    "builder,weights",
    [
        (torchvision.models.resnet50, torchvision.models.ResNet50_Weights.IMAGENET1K_V2),
        (torchvision.models.densenet121, torchvision.models.DenseNet121_Weights.IMAGENET1K_V1),
        (torchvision.models.mobilenet_v2, torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V2),
    ],
)
def test_count_macs_matches_torchvisions_published_figure(builder, weights):
    """torchvision's "GFLOPS" (``_ops``: 4.09 for ResNet-50) are multiply-accumulates."""
    with torch.device("meta"):
        model = builder().eval()
        x = torch.empty(1, 3, 224, 224)
    assert bench.count_macs(model, x) / 1e9 == pytest.approx(weights.meta["_ops"], rel=2e-3)


@functools.cache
def _measured(arch: str, model_kwargs: str, num_classes: int, crop: int | None) -> float | None:
    """One count per configuration (the V1 and V2 entries of an architecture share theirs):
    of the preprocessing, only the crop sets the input size."""
    return recipes_publish.architecture_gmacs(
        arch, json.loads(model_kwargs), num_classes, {} if crop is None else {"crop": crop}
    )


@pytest.mark.parametrize("name", zoo.list_models(pretrained=True))
def test_recorded_gmacs_equal_a_fresh_count(name):
    info = zoo.info(name)
    measured = _measured(
        info.arch, json.dumps(info.model_kwargs, sort_keys=True), info.num_classes, info.preprocess.get("crop")
    )
    if weight_entries.input_kind(info.arch) == "graphs":
        assert info.gmacs is None and measured is None
    else:
        assert info.gmacs == pytest.approx(measured, rel=0.01), f'{name}: set "gmacs": {measured}'
    if info.torchvision_ops is not None:  # torchvision's counter sees fewer: a fused attention kernel counts nothing
        seen = recipes_publish.architecture_gmacs(
            info.arch, info.model_kwargs, info.num_classes, info.preprocess, attention=False
        )
        assert info.torchvision_ops == pytest.approx(seen, rel=0.01) and seen < measured, name


def test_bench_command_writes_a_timm_style_csv(tmp_path, capsys):
    path = tmp_path / "results.csv"
    assert (
        main(["bench", "resnet20.fmnist", "--batch", "2", "--repeats", "1", "--csv", str(path), "--no-optimize"]) == 0
    )
    out = capsys.readouterr().out
    assert f"capability {cpu_features().capability}" in out and "AMX" in out
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 1 and CSV_COLUMNS <= set(rows[0])
    row, info = rows[0], zoo.info("resnet20.fmnist")
    assert row["model"] == "resnet20.fmnist" and row["weights"] == "bundled" and row["batch_size"] == "2"
    assert float(row["infer_samples_per_sec"]) > 0 and float(row["infer_step_time_ms"]) > 0
    assert float(row["gmacs"]) == info.gmacs and float(row["top1"]) == info.metrics["fashion-mnist"]["top1"]
    assert float(row["param_count"]) == pytest.approx(info.num_params / 1e6, abs=1e-3)
    assert row["input_shape"] == "1x28x28"
    assert "resnet20.fmnist" in out


def test_bench_skips_graph_models_and_uncached_downloads_and_says_why(capsys):
    assert main(["bench", "gin3.triangles_er", "resnet18.tv_in1k", "--repeats", "1", "--no-optimize"]) == 0
    out = capsys.readouterr().out
    assert "skipped gin3.triangles_er: graph model" in out
    assert "skipped resnet18.tv_in1k: published weights not in the cache" in out


def test_bench_times_cached_published_weights(http_server, monkeypatch):
    torch.manual_seed(0)
    publish(
        http_server, monkeypatch, "mobilenet_v3_small.tv_in1k", torchvision.models.mobilenet_v3_small().state_dict()
    )
    zoo.load("mobilenet_v3_small.tv_in1k")  # downloads it into the test's cache
    (row,), skipped = cli_bench.measure_targets(bench.select(["mobilenet_v3_small.tv_in1k"]), [1], repeats=1)
    assert not skipped and row.weights == "cached" and row.top1 == 67.668 and row.infer_samples_per_sec > 0


def test_an_architecture_name_is_timed_with_random_weights_at_its_default_entrys_input():
    (row,), _ = cli_bench.measure_targets(bench.select(["resnet20"]), [1], repeats=1)
    assert row.weights == "random" and row.top1 is None and row.file_size_mb is None
    assert row.gmacs == zoo.info("resnet20").gmacs and row.input_shape == "1x28x28"


@pytest.mark.parametrize(
    "argv,problem",
    [
        (["bench", "resnet99*"], "'resnet99*' matches no weight entry or architecture"),
        (["bench", "resnet20.fmnist", "--batch", "0,x"], "--batch: must be whole numbers from 1 to 65536 separated by"),
        (["bench", "resnet20.fmnist", "--repeats", "0"], "argument --repeats: must be from 1 to 100000, got '0'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, problem, capsys):
    try:
        code = main([*argv, "--no-optimize"])
    except SystemExit as exit:  # refused as the options are parsed
        code = exit.code
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and problem in captured.err and captured.out == ""


def test_publish_records_the_gmacs_of_new_weights(tmp_path):
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    provenance = Provenance(data="none", command="test", seed=0, epochs=0, wall_time_s=0)
    entry = publish_entry(
        model,
        "resnet20.test",
        title="test",
        task="fashion-mnist",
        metrics={},
        provenance=provenance,
        model_kwargs={"in_chans": 1},
        preprocess={"crop": 28},
        root=tmp_path,
    )
    assert entry["gmacs"] == zoo.info("resnet20.fmnist").gmacs
    assert json.loads((tmp_path / "resnet20.test.json").read_text())[0]["gmacs"] == entry["gmacs"]


def test_optimized_speed_is_timed_and_its_precision_reported(monkeypatch):
    """The optimize columns time what zoo.deploy.inference.optimize returns (here a stand-in that
    counts its calls: two warm-ups and the timed repeats, in turn with fp32 eager) and report
    its chosen precision."""
    import zoo.deploy.optimize_report

    class Counting(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model, self.calls = model, 0
            self.optimize_report = zoo.deploy.optimize_report.OptimizeReport("int8", 1.0, [], "AVX2", False, "cpu")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.model(x)

    built: list[Counting] = []
    monkeypatch.setattr(
        bench, "optimize_model", lambda model, example_input: built.append(Counting(model)) or built[-1]
    )
    rows, _ = cli_bench.measure_targets(bench.select(["dbn.fmnist"]), [1, 8], repeats=3, optimize=True)
    assert [counting.calls for counting in built] == [5, 5]
    for row in rows:
        assert row.optimized_precision == "int8" and row.optimized_samples_per_sec > 0
        assert row.optimized_speedup == pytest.approx(
            row.optimized_samples_per_sec / row.infer_samples_per_sec, abs=0.01
        )
