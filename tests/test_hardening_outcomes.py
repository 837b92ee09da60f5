"""The fourth hardening round's silent or costly outcomes (issue 50): a hold-out of one class
from class-ordered shards, a brace range that ate the machine, a NaN label that turned a
regression into a classification, a shard read twice, a remembered precision that skipped its
loss check. Each now says so, or cannot happen."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import torch

from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.shards.brace_ranges import brace_count
from zoo.training.data.shards.shard_files import MAX_SHARDS, expand_spec
from zoo.training.data.shards.shard_writer import write_shards


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
        from zoo.training.data.shards.shard_files import expand_spec
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

    monkeypatch.setenv("ZOO_CPU_FEATURES", "avx512_bf16")
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
    short = choose(trainer(channels_last=False, compile=False), total_steps=5)
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


# --- 3: one label reader: NaN, infinities and overflow refused by line or key ------------------

_SMILES = ["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC(=O)O", "CCCC", "CCOC", "CN", "CO", "OCCO", "CCCN"]


def _molecules(path: Path, labels: list[str]) -> Path:
    path.write_text("smiles,y\n" + "".join(f"{s},{y}\n" for s, y in zip(_SMILES, labels)))
    return path


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("-Infinity", r"the label '-Infinity' is infinite"),
        ("1e999", r"the label '1e999' is infinite"),
        ("1e308", r"the label '1e308' is beyond ±1e\+150, where squared errors overflow the float64 .* its log\)"),
        ("-3e200", r"the label '-3e200' is beyond ±1e\+150, where squared errors overflow the float64 .* its log\)"),
    ],
)
def test_a_bad_number_among_numeric_molecule_labels_is_refused_by_line(tmp_path: Path, bad: str, why: str) -> None:
    # one row `CCO,nan` turned a regression into a 4-class classifier with a class named 'nan'
    pytest.importorskip("rdkit")
    from zoo.training.data.molecules.molecule_files import molecule_source

    path = _molecules(tmp_path / "m.csv", [str(i % 4) for i in range(11)] + [bad])
    with pytest.raises(DataError, match=rf"m\.csv, line 13: {why}; a regression target .* needs finite numbers"):
        molecule_source(path)
    _molecules(tmp_path / "m.csv", [str(i % 4) for i in range(11)] + ["nan"])  # NaN: a missing value, said so
    with pytest.raises(DataError, match=r"m\.csv, line 13: the label is missing \('nan'\).*--skip-bad-rows"):
        molecule_source(path)


def test_a_constant_regression_target_says_its_value(tmp_path: Path) -> None:
    # labels of 1e308 were "every 'label' value is 8.44 ... must vary"
    pytest.importorskip("rdkit")
    from zoo.training.data.molecules.molecule_files import MoleculeOptions, molecule_source

    with pytest.raises(DataError, match=r"every 'y' value is 1e\+15; a regression target must vary"):
        molecule_source(_molecules(tmp_path / "m.csv", ["1e15"] * 12))
    wide = molecule_source(_molecules(tmp_path / "w.csv", ["1e15", "-1e15"] * 6))
    assert wide.target is not None and wide.target["std"] > 1e15  # float64 statistics: no overflow
    # NaN among class names is a missing value, unless the user says it is a class
    names = ["a", "b"] * 5 + ["a", "nan"]
    with pytest.raises(DataError, match=r"line 13: the label 'nan' is not a number \(NaN\), a missing value"):
        molecule_source(_molecules(tmp_path / "c.csv", names))
    kept = molecule_source(_molecules(tmp_path / "c.csv", names), MoleculeOptions(task="classification"))
    assert kept.class_names == ["a", "b", "nan"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_text_rows_refuse_a_nan_label_by_line(tmp_path: Path, suffix: str) -> None:
    # a file of numeric labels with nan/inf failed with a misleading "60 classes ... hold-out" line
    labels = [str(i % 2) for i in range(20)] + ["inf"]
    path = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        path.write_text("text,label\n" + "".join(f"row {i},{y}\n" for i, y in enumerate(labels)))
    else:
        path.write_text("".join(json.dumps({"text": f"row {i}", "label": y}) + "\n" for i, y in enumerate(labels)))
    line = 22 if suffix == ".csv" else 21
    with pytest.raises(DataError, match=rf"t{suffix}, line {line}: the label 'inf' is infinite, a missing value"):
        open_data(path)


def test_class_indices_of_thousands_of_digits_name_their_file_and_key(tmp_path: Path) -> None:
    # Python's int-conversion limit, naming neither the shard nor the key
    digits = "7" * 5000
    path = tmp_path / "t.csv"
    path.write_text("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(10)) + f"last,{digits}\n")
    with pytest.raises(DataError, match=r"t\.csv, line 12: label 7{40}; integer labels are class indices"):
        open_data(path)
    shard = tmp_path / "s" / "a.tar"
    shard.parent.mkdir()
    with tarfile.open(shard, "w") as tar:
        for key, label in (("k0", b"0"), ("k1", b"1"), ("k2", digits.encode())):
            for ext, data in (("npy", b"x"), ("cls", label)):  # scanned for labels, never decoded
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"shard .*a\.tar, sample 'k2': KEY\.cls holds '7{40}'; it should be a class"):
        open_data(shard.parent)


# --- 1: a hold-out of whole shards represents every class -------------------------------------


def _folder(root: Path, per_class: int = 20) -> Path:
    from test_shards import image_folder

    return image_folder(root, per_class=per_class, size=4)


def test_class_ordered_shards_hold_out_what_covers_the_classes_and_say_what_it_lacks(tmp_path: Path) -> None:
    # 3 classes of 20 in shards of 15, written in class order: validation was the last shard, class
    # 2 only ("val_acc 1.0000"), with no warning, and the card said "validation split: random"
    write_shards(_folder(tmp_path / "images"), tmp_path / "ordered", shard_size=15, seed=None)
    manifest = json.loads((tmp_path / "ordered" / "manifest.json").read_text())
    assert manifest["shuffle_seed"] is None
    assert [e["class_counts"] for e in manifest["shards"]] == [[15, 0, 0], [5, 10, 0], [0, 10, 5], [0, 0, 15]]
    for folder in ("ordered", "scanned"):  # from the manifest, and from a scan of shards without one
        if folder == "scanned":
            (tmp_path / "ordered" / "manifest.json").rename(tmp_path / "manifest.json")
        source = open_data(tmp_path / "ordered")
        with pytest.warns(
            UserWarning, match=r"validation \(1 shard \(train-000002\.tar\)\) holds no samples of 1 of 3 "
        ):
            train, val = source.split(0.1)
        assert [s.name for s in val.shards] == ["train-000002.tar"] and len(train) == 45
        lacking = "'ant'" if folder == "ordered" else "'0'"  # a scan knows the class indices only
        assert source.split_note == (
            f"chosen to cover the most classes: 1 shard (train-000002.tar) (whole shards; lacks {lacking})"
        )


def test_zoo_shards_shuffles_across_shards_by_default(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from zoo.cli import main

    assert main(["shards", str(_folder(tmp_path / "images")), "--out", str(tmp_path / "s"), "--shard-size", "15"]) == 0
    assert "(60 samples, shuffled with seed 0)" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["shuffle_seed"] == 0 and all(all(e["class_counts"]) for e in manifest["shards"])
    source = open_data(tmp_path / "s")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, val = source.split(0.1)
    assert [s.name for s in val.shards] == ["train-000003.tar"]
    assert source.split_note == "the last 1 shard (train-000003.tar) (whole shards; all 3 classes)"
    # the same seed, the same bytes
    write_shards(tmp_path / "images", tmp_path / "again", shard_size=15, seed=0)
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["shards"] == manifest["shards"]


def test_a_manifests_per_shard_class_counts_are_checked(written: Path) -> None:
    manifest = json.loads((written / "manifest.json").read_text())
    manifest["shards"][0]["class_counts"] = [5, 5]
    (written / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"shards\[0\]\.class_counts should be its samples of each class, adding up"):
        open_data(written)


def test_the_card_says_how_validation_was_made() -> None:
    # "validation split: random" when --val-data named a separate file
    from zoo.training.data.source import DataSource
    from zoo.training.finetune import FinetuneOptions
    from zoo.training.finetune.card import task_details

    source = DataSource("tensors", "t", 10, 2, ["a", "b"], lambda i, t: None)
    assert task_details(source, FinetuneOptions(val_data="val.pt"))["split"] == (
        "none: the separate data val.pt (--val-data)"
    )
    assert task_details(source, FinetuneOptions(val_fraction=0))["split"] == "none (--val-fraction 0)"
    assert task_details(source, FinetuneOptions())["split"] == "random"
    source.split_note = "the last 1 shard (x.tar) (whole shards; all 2 classes)"
    assert task_details(source, FinetuneOptions())["split"] == source.split_note


# --- unclear outcomes -------------------------------------------------------------------------


def test_a_name_of_thousands_of_characters_is_one_short_line(capsys: pytest.CaptureFixture) -> None:
    # a raw OSError from zoo.load; the command line echoed all 5,000 characters
    import zoo
    from zoo.cli import main
    from zoo.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"^'a{40}'\.\.\. \(5,000 characters\) is neither a model name"):
        zoo.load("a" * 5000)
    with pytest.raises(InvalidArgumentError, match=r"\(300 characters\) is neither a model name nor a path"):
        zoo.load("b" * 300)
    assert main(["info", "a" * 5000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 300 and "characters) is too long for a file name here" in err


def test_an_empty_tar_says_it_is_empty(tmp_path: Path) -> None:
    # "0 classes: a classifier needs at least 2"
    (tmp_path / "s").mkdir()
    tarfile.open(tmp_path / "s" / "a.tar", "w").close()
    with pytest.raises(DataError, match=r"shard .*a\.tar holds no samples: an empty tar"):
        open_data(tmp_path / "s")


def test_an_unreadable_image_names_its_shard_and_key_not_a_bytesio(tmp_path: Path) -> None:
    from zoo.loading.images import open_image
    from zoo.training.data.shards.shard_source import SampleDecoder

    decode = SampleDecoder("images", ["a", "b"], 1)
    with pytest.raises(DataError) as caught:
        decode({"__shard__": "s.tar", "__key__": "k1", "png": b"not an image", "cls": b"0"})
    assert str(caught.value).startswith("shard s.tar, sample 'k1' (png) is not a readable image (no image format")
    with pytest.raises(DataError, match=r"^the image's bytes is not a readable image") as caught:
        open_image(io.BytesIO(b"xx"))
    assert "BytesIO" not in str(caught.value)


def test_the_monitor_help_names_each_default() -> None:
    # "(default val_acc)" while a regression picks its best epoch by val_loss
    from zoo.cli.parser import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "finetune" in a.choices)  # type: ignore[operator]
    text = " ".join(commands.choices["finetune"].format_help().split())  # type: ignore[index]
    assert "val_acc for classes, val_loss for a regression or other steps, train_loss without validation" in text
