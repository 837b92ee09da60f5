"""Every choice zoo makes by the CPU reads one function, `zoo.devices.cpu_features`, and
``ZOO_CPU_FEATURES`` makes it choose as on another CPU: the AVX2, AVX-512-BF16 and AMX paths
are exercised on whatever machine runs the suite (`make test` names what it sees first)."""

from __future__ import annotations

import pytest
import torch

from zoo.deploy.search import Machine
from zoo.devices import CPU_LEVELS, cpu_features
from zoo.errors import InvalidArgumentError
from zoo.training.loop import probe_gain
from zoo.training.loop.speed_settings import candidates

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("level", "kind", "bf16"),
    [("avx2", "avx2", False), ("avx512", "avx512", False), ("avx512_bf16", "avx512-bf16", True), ("amx", "amx", True)],
)
def test_each_level_makes_every_choice_as_on_that_cpu(monkeypatch, level, kind, bf16) -> None:
    monkeypatch.setenv("ZOO_CPU_FEATURES", level)
    features = cpu_features()
    assert features.override == level and features.bf16 is bf16 and f"ZOO_CPU_FEATURES={level}" in str(features)
    assert Machine.here(CPU).kind == kind  # zoo.optimize's expected speeds and search order
    assert probe_gain.device_kind(CPU) == ("cpu-bf16" if bf16 else "cpu")  # training auto's expectations
    settings, skipped = candidates(CPU, image=True, fixed_shapes=True, channels_last=None, compile=False)
    assert ("bf16" in {s.precision for s in settings}) is bf16
    assert bf16 or "no native bf16" in skipped["bf16"]


def test_without_the_variable_the_cpu_speaks_for_itself(monkeypatch) -> None:
    monkeypatch.delenv("ZOO_CPU_FEATURES", raising=False)
    features = cpu_features()
    assert features.override is None and features.capability == torch.backends.cpu.get_cpu_capability()
    assert features.bf16 is bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert set(CPU_LEVELS) == {"avx2", "avx512", "avx512_bf16", "amx"}


def test_an_unknown_level_is_refused_naming_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("ZOO_CPU_FEATURES", "avx1024")
    with pytest.raises(InvalidArgumentError, match=r"ZOO_CPU_FEATURES='avx1024' .* avx2, avx512, avx512_bf16, amx"):
        cpu_features()


def test_the_command_line_stops_on_an_unknown_level_before_any_work(monkeypatch, tmp_path, pngs, capsys) -> None:
    from zoo.cli import main

    monkeypatch.setenv("ZOO_CPU_FEATURES", "sse2")
    assert main(["finetune", "resnet20", "--data", str(pngs), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ZOO_CPU_FEATURES='sse2'" in err
    assert not (tmp_path / "run").exists()
