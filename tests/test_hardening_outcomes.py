"""The fourth hardening round's silent or costly outcomes (issue 50): a hold-out of one class
from class-ordered shards, a brace range that ate the machine, a NaN label that turned a
regression into a classification, a shard read twice, a remembered precision that skipped its
loss check. Each now says so, or cannot happen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.shard_files import MAX_SHARDS, brace_count, expand_spec
from zoo.training.data.shard_writer import write_shards


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """Four shards of two tensors each (two classes), with their manifest."""
    x, y = torch.randn(8, 3), torch.arange(8) % 2
    torch.save({"x": x, "y": y}, tmp_path / "data.pt")
    write_shards(tmp_path / "data.pt", tmp_path / "shards", shard_size=2)
    return tmp_path / "shards"


# --- 2: a brace range is counted before it is expanded ----------------------------------------


def test_a_huge_brace_range_is_refused_before_it_is_expanded(written: Path) -> None:
    # expanded whole before the shard-count limit applied: 108 s, then killed at 22.8 GB
    code = textwrap.dedent(
        f"""
        import resource
        from zoo.training.data.shard_files import expand_spec
        from zoo.errors import DataError
        size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, size + 2**30))  # 1 GiB more than now
        for spec in ("{written}/train-{{000000..999999999}}.tar", "{written}/t-{{{{0..99999}}{{0..99999}},b}}.tar"):
            try:
                expand_spec(spec)
            except DataError as error:
                print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(lines) == 2, lines
    assert all("names more than 100,000 shards, the limit of one spec" in line for line in lines)


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("a", 1),
        ("t-{0..9}.tar", 10),
        ("t-{000..100..2}.tar", 51),
        ("t-{a..e}{1,2}.tar", 10),
        ("{x,{1..3}y,}", 5),
        ("t-{1}.tar", 1),
        ("t-{0..9999999999999999999999}.tar", MAX_SHARDS + 1),
    ],
)
def test_brace_names_are_counted_as_braceexpand_makes_them(pattern: str, names: int) -> None:
    from braceexpand import braceexpand

    assert brace_count(pattern) == names
    if names <= MAX_SHARDS:
        assert len(list(braceexpand(pattern))) == names


def test_unbalanced_braces_are_one_data_error(written: Path) -> None:
    with pytest.raises(DataError, match=r"Unbalanced braces.*check the braces"):
        expand_spec(f"{written}/train-{{000000..000003.tar")


# --- 4: a shard named twice ---------------------------------------------------------------------


def test_a_shard_named_twice_is_refused_by_name(written: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = written / "train-000000.tar", written / "train-000001.tar"
    with pytest.raises(DataError, match=r"names shard .*train-000000\.tar twice: its samples would be read twice"):
        open_data(f"{a}::{a}::{b}")
    with pytest.raises(DataError, match=r"train-00000\{0,0,1\}.tar.*names shard .*train-000000\.tar twice"):
        expand_spec(f"{written}/train-00000{{0,0,1}}.tar")
    # the same file by another path
    with pytest.raises(DataError, match=r"twice \(as .*train-000000\.tar\)"):
        expand_spec(f"{a}::{written}/../{written.name}/train-000000.tar")
    assert len(expand_spec(f"{a}::{b}")) == 2


# --- 5: the precision speed cache ------------------------------------------------------------


def test_a_remembered_precision_is_checked_against_fp32s_loss(
    zoo_home: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    # a model whose bf16 loss departs by 525% trained in bf16 when another model of the same key
    # (class, parameters, batch shape) had been measured first
    from test_train_speed import choose, fixed_trials, trainer

    from zoo.training.loop import speed

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(speed, "probe", fixed_trials({"fp32": 100, "bf16": 50}))
    first = choose(trainer(channels_last=False, compile=False))
    assert first.precision == "bf16" and not first.cached
    monkeypatch.setattr(speed, "probe", fixed_trials({"fp32": 100, "bf16": 50}, {"fp32": 1.0, "bf16": 6.25}))
    other = choose(trainer(channels_last=False, compile=False))
    assert other.cache_key == first.cache_key and not other.cached and other.precision == "fp32"
    assert "the remembered bf16 departs from fp32's loss on this model by 525.0%" in caplog.text
    assert speed.remembered(first.cache_key, speed.CACHE_FILE)[0] == "fp32"  # what this model's search chose
    # a run too short to check it trains in fp32
    monkeypatch.setattr(speed, "probe", fixed_trials({"fp32": 100, "bf16": 50}))
    assert choose(trainer(channels_last=False, compile=False)).precision == "fp32"
    speed.write_cache(first.cache_key, "bf16", first.candidates, speed.CACHE_FILE)
    short = choose(trainer(channels_last=False, compile=False), total_steps=50)
    assert short.precision == "fp32" and not short.cached


def test_runs_writing_the_speed_cache_at_once_keep_every_entry(zoo_home: Path) -> None:
    # four runs writing at once kept three entries: no lock on the read-modify-write
    code = textwrap.dedent(
        """
        import os, sys, time
        from zoo.deploy.optimize_report import Candidate, write_cache
        print("ready", flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.01)
        for i in range(25):
            write_cache(f"{sys.argv[2]}-{i}", "fp32", [Candidate("fp32", 0.01, 1.0, passed=True)], "train_speed.json")
        """
    )
    go = zoo_home.parent / "go"
    env = {**os.environ, "ZOO_HOME": str(zoo_home)}
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(go), f"run{n}"], env=env, stdout=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    assert all(run.stdout.readline() == "ready\n" for run in runs)  # type: ignore[union-attr]
    go.touch()
    assert [run.wait(timeout=120) for run in runs] == [0] * 4
    assert len(json.loads((zoo_home / "train_speed.json").read_text())) == 100
