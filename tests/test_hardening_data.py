"""Data files as a hostile user hands them over: tensor files (.pt, .npz), WebDataset shards and
their manifest, `zoo shards` stopped on the way, and the remembered ``precision="auto"`` choices
in ``$ZOO_HOME``. Each is refused before anything is built, in one `DataError` naming the file
and the field, or (a cache) ignored; nothing hangs, nothing allocates what the file only claims."""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from zoo.cli import main
from zoo.deploy import optimize_report
from zoo.errors import DataError, WeightsError
from zoo.store.state_dict_files import load_state_dict_file
from zoo.training.data.kinds import open_data
from zoo.training.data.shards.shard_files import MANIFEST
from zoo.training.data.shards.shard_source import SampleDecoder
from zoo.training.data.shards.shard_writer import write_shards


def _images(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 255, (n, 3, 8, 8), dtype=torch.uint8), torch.arange(n) % 2


def _tensor_file(path: Path, **extra: object) -> Path:
    x, y = _images()
    torch.save({"x": x, "y": y, **extra}, path)
    return path


# --- tensor files ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("classes", "match"),
    [
        (["cat\nzoo: error: fake", "dog"], r"'classes'\[0\] is 'cat\\nzoo: error: fake': a class name is 1 to 256"),
        (["ok", "\x1b[31mred\x1b[0m"], r"'classes'\[1\] .* printable characters"),
        (["a" * 10_000, "b"], r"'classes'\[0\] is 'a{40}'\.\.\."),
        ([""] + ["b"], r"'classes'\[0\] is ''"),
    ],
)
def test_class_names_of_a_tensor_file_are_printable_and_bounded(tmp_path: Path, classes: list, match: str) -> None:
    # they went raw into the model card (README.md) and the terminal: a newline forged lines there
    path = _tensor_file(tmp_path / "data.pt", classes=classes)
    with pytest.raises(DataError, match=rf"data\.pt: {match}"):
        open_data(path)


@pytest.mark.parametrize(
    ("names", "match"),
    [
        ([f"c{i}" for i in range(1_000_000)], r"'classes' names 1,000,000 classes, over the 100,000"),
        ([f"c{i}" for i in range(999_999)] + ["c0"], r"'classes' names 1,000,000 classes, over the 100,000"),
        ([f"c{i}" for i in range(50_000)] + ["c7"], r"'classes' names \['c7'\] more than once"),
    ],
    ids=["a-million", "a-million-one-twice", "one-twice"],
)
def test_many_class_names_are_checked_at_once(tmp_path: Path, names: list[str], match: str) -> None:
    # the duplicate check was quadratic (names.count per name: hours for 10**6 names with one twice);
    # without one twice, a 10**6-output head was built. The bound guards against a hang, not a speed.
    path = _tensor_file(tmp_path / "data.pt", classes=names)
    started = time.perf_counter()
    with pytest.raises(DataError, match=rf"data\.pt: {match}"):
        open_data(path)
    assert time.perf_counter() - started < 60


def test_an_npz_zip_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    # 256 MiB of zeros in a file of about 256 KiB: numpy would inflate all of it into memory
    size = 256 * 2**20
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({size}, 1, 1), }}".ljust(117) + "\n"
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as member:
            member.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
            for _ in range(size // 2**24):
                member.write(bytes(2**24))
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(4, np.int64))
        archive.writestr("y.npy", buffer.getvalue())
    assert path.stat().st_size < 2 * 2**20
    with pytest.raises(DataError, match=r"bomb\.npz: member 'x\.npy' declares 268,435,[0-9]+ bytes .* zip bomb"):
        open_data(path)


def test_a_torch_file_zip_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    # torch.load inflates a deflated record (torch.save never writes one): 80 MiB from a tiny file
    plain = tmp_path / "plain.pt"
    torch.save({"x": torch.zeros(80 * 2**14, 1, 8, 8, dtype=torch.uint8), "y": torch.zeros(4, dtype=torch.long)}, plain)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(bomb, "w") as out:
        for info in source.infolist():
            data = source.read(info.filename)
            out.writestr(info.filename, data, zipfile.ZIP_DEFLATED if len(data) > 2**20 else zipfile.ZIP_STORED, 9)
    assert bomb.stat().st_size < 2**20
    with pytest.raises(DataError, match=r"bomb\.pt: member '.*data/0' declares 83,886,080 bytes .* zip bomb"):
        open_data(bomb)
    with pytest.raises(WeightsError, match=r"bomb\.pt: member .* torch\.save never compresses"):
        load_state_dict_file(bomb)
    assert load_state_dict_file(plain)["x"].shape[0] == 80 * 2**14  # the same file stored, as torch.save writes it


def test_a_compressed_npz_of_real_data_still_reads(tmp_path: Path) -> None:
    x, y = _images(16)
    np.savez_compressed(tmp_path / "data.npz", x=x.numpy(), y=y.numpy())
    assert open_data(tmp_path / "data.npz").num_samples == 16


def test_a_fifo_named_like_a_tensor_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "data.pt"
    os.mkfifo(fifo)  # reading it would block until a writer comes; it was called "does not exist"
    with pytest.raises(DataError, match=r"data\.pt is not a file or a folder \(a FIFO"):
        open_data(fifo)
    from zoo.training.data.tensors.tensor_files import tensor_file_source

    npz = tmp_path / "data.npz"
    os.mkfifo(npz)
    with pytest.raises(DataError, match=r"data\.npz is not a file"):
        tensor_file_source(npz)


# --- shards and their manifest -----------------------------------------------------------------


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """Four shards of two images each, with their manifest."""
    path = _tensor_file(tmp_path / "data.pt")
    write_shards(path, tmp_path / "shards", shard_size=2)
    return tmp_path / "shards"


def _edit_manifest(folder: Path, **changes: object) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest.update(changes)
    (folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        # a sample count past what an index holds was an OverflowError traceback
        ({"shards": "samples=10**30"}, r"shards\[0\]\.samples should be a whole number from 1 to"),
        ({"shards": "samples=2**62"}, r"shards\[0\]\.samples should be a whole number from 1 to"),
        # a size the images were resized to: the run was killed for memory
        ({"image_size": [10**6, 10**6]}, r"image_size should be \[height, width\] of at most"),
        ({"image_size": [32, "x"]}, r"image_size should be"),
        # "in_chans ... must be an int >= 1", naming neither the file nor the field
        ({"channels": -3}, r"channels should be 1, 3 or 4, got -3"),
        ({"channels": True}, r"channels should be 1, 3 or 4"),
        ({"class_counts": [-1, "x"]}, r"class_counts should be a whole number >= 0 for each class"),
        ({"class_counts": [1, 2, 3]}, r"class_counts should be"),
        ({"classes": ["a\nzoo: error: fake", "b"]}, r"classes\[0\] is 'a\\nzoo: error: fake'"),
        ({"classes": [f"c{i}" for i in range(100_001)]}, r"classes names 100,001 classes, over the 100,000"),
    ],
)
def test_a_crafted_manifest_names_its_field(written: Path, changes: dict, match: str) -> None:
    if changes.get("shards", "").startswith("samples="):
        manifest = json.loads((written / MANIFEST).read_text())
        for entry in manifest["shards"]:
            entry["samples"] = eval(changes["shards"].split("=", 1)[1])  # noqa: S307 (a literal above)
        changes = {"shards": manifest["shards"]}
    _edit_manifest(written, **changes)
    with pytest.raises(DataError, match=rf"manifest\.json: {match}"):
        open_data(written)


def test_a_manifest_count_its_shard_cannot_hold_is_refused(written: Path) -> None:
    # within the bound, but more samples than the shard's bytes hold: the samplers are sized by it
    manifest = json.loads((written / MANIFEST).read_text())
    manifest["shards"][0]["samples"] = 10_000_000
    del manifest["shards"][0]["class_counts"]  # (they would no longer add up)
    (written / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"manifest\.json: train-000000\.tar counts 10,000,000 samples, more than"):
        open_data(written)


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(written: Path) -> None:
    # opening it blocked the run for ever (until a writer came)
    (written / MANIFEST).unlink()
    os.mkfifo(written / MANIFEST)
    with pytest.raises(DataError, match=r"manifest\.json is not a file \(a folder, a FIFO or a device\)"):
        open_data(f"{written}/train-{{000000..000003}}.tar")


def test_a_deeply_nested_manifest_names_its_file(written: Path) -> None:
    (written / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=r"manifest\.json is not JSON \(RecursionError"):
        open_data(written)


def test_scanned_shards_whose_first_sample_has_no_image(tmp_path: Path, written: Path) -> None:
    # a first sample of links (skipped) and a label: StopIteration escaped as a traceback
    folder = tmp_path / "scanned"
    folder.mkdir()
    for shard in sorted(written.glob("*.tar")):
        with tarfile.open(folder / shard.name, "w") as out, tarfile.open(shard) as src:
            link = tarfile.TarInfo("evil.png")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            out.addfile(link)
            label = tarfile.TarInfo("evil.cls")
            label.size = 1
            out.addfile(label, io.BytesIO(b"0"))
            for member in src.getmembers():
                out.addfile(member, src.extractfile(member))
    with tarfile.open(folder / "train-000000.tar", "w") as out:  # the first shard: no image at all
        label = tarfile.TarInfo("evil.cls")
        label.size = 1
        out.addfile(label, io.BytesIO(b"1"))
    with pytest.raises(DataError, match=r"train-000000\.tar holds no image"):
        open_data(folder)


def test_a_label_file_nested_too_deep_is_a_data_error(tmp_path: Path) -> None:
    # a RecursionError is no DataError: --skip-bad-rows did not skip it, and the message named no shard
    decode = SampleDecoder("tensors", ["a", "b"])
    record = {"__key__": "k", "__shard__": "s.tar", "npy": b"", "json": b"[" * 100_000 + b"]" * 100_000}
    with pytest.raises(DataError, match=r"shard s\.tar, sample 'k': KEY\.json is not JSON"):
        decode.label("shard s.tar, sample 'k'", record, ("json",))


# --- zoo shards stopped on the way -----------------------------------------------------------------


def test_an_interrupted_zoo_shards_says_one_line_and_leaves_no_shards(tmp_path: Path) -> None:
    # it left the finished shards without a manifest (a later run scanned them as the whole data
    # set, and `zoo shards` again refused the folder), and a traceback of the open tar stream
    x = torch.randint(0, 255, (4000, 3, 32, 32), dtype=torch.uint8)
    torch.save({"x": x, "y": torch.arange(4000) % 2}, tmp_path / "data.pt")
    out = tmp_path / "shards"
    process = subprocess.Popen(
        [sys.executable, "-m", "zoo", "shards", str(tmp_path / "data.pt"), "--out", str(out), "--shard-size", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 (a background job ignores it)
    )
    deadline = time.monotonic() + 120
    while not any(p.suffix == ".tar" for p in out.glob(".staging-*/*")) and time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"zoo shards ended before it was interrupted: {process.communicate()}")
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.strip() == "zoo: interrupted"
    assert sorted(p.name for p in out.iterdir()) == []  # the folder takes a new `zoo shards` as it is


def test_zoo_shards_writes_everything_or_nothing(tmp_path: Path, written: Path, monkeypatch) -> None:
    assert sorted(p.name for p in written.iterdir()) == [MANIFEST] + [f"train-{i:06d}.tar" for i in range(4)]
    assert open_data(written).num_samples == 8
    from zoo.training.data.shards import shard_writer

    real, calls = shard_writer._write_shard, []

    def stopped_at_the_third(path: Path, samples: list, *rest: object) -> dict:
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(path, samples, *rest)

    monkeypatch.setattr(shard_writer, "_write_shard", stopped_at_the_third)
    out = tmp_path / "again"
    with pytest.raises(KeyboardInterrupt):
        write_shards(_tensor_file(tmp_path / "data.pt"), out, shard_size=2)
    assert len(calls) == 3
    assert list(out.iterdir()) == []  # the two finished shards went with the staging folder


@pytest.mark.parametrize("channels", [2, 5])
def test_zoo_shards_refuses_images_png_cannot_hold(tmp_path: Path, capsys, channels: int) -> None:
    # 5 channels: a TypeError traceback from PIL; 2: shards written that no run could read
    x = torch.randint(0, 255, (8, channels, 8, 8), dtype=torch.uint8)
    torch.save({"x": x, "y": torch.arange(8) % 2}, tmp_path / "data.pt")
    assert main(["shards", str(tmp_path / "data.pt"), "--out", str(tmp_path / "s")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"data.pt (8 samples of shape ({channels}, 8, 8)): images of {channels}" in error
    assert not (tmp_path / "s").exists()


def test_zoo_shards_refuses_class_names_it_could_not_read_back(tmp_path: Path, capsys) -> None:
    rows = tmp_path / "rows.csv"
    labels = ["ok", "a\x1b[2Jb"] * 3  # an escape code clears the screen of whoever prints the class list
    rows.write_text("text,label\n" + "".join(f"row {i},{label}\n" for i, label in enumerate(labels)))
    assert main(["shards", str(rows), "--out", str(tmp_path / "s")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "rows.csv, line 3: the label 'label' is 'a\\x1b[2Jb'" in error
    assert not (tmp_path / "s").exists()


def test_a_shard_stopped_mid_write_closes_its_tar_stream(tmp_path: Path, monkeypatch) -> None:
    # the open tar stream was collected later and wrote to its closed file: "Exception ignored in:
    # <function _Stream.__del__ ...> ValueError: write to closed file", a traceback after the one line
    import gc

    from zoo.training.data.shards import shard_writer

    class Stopped(shard_writer._tar_writer()):
        def write(self, sample: dict) -> int:
            if sample["__key__"].endswith("1"):
                raise KeyboardInterrupt
            return super().write(sample)

    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(shard_writer, "_tar_writer", lambda: Stopped)
    with pytest.raises(KeyboardInterrupt):
        write_shards(_tensor_file(tmp_path / "data.pt"), tmp_path / "s", shard_size=4)
    gc.collect()
    assert unraisable == []
    assert list((tmp_path / "s").iterdir()) == []


# --- remembered precision choices ------------------------------------------------------------------


def _remember(home: Path, text: str | None = None, **candidate: object) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "train_speed.json"
    if text is None:
        fields = {"name": "bf16", "median_s": 0.01, "speedup": 2.0, "passed": True, "note": ""} | candidate
        text = json.dumps({"k": {"precision": "bf16", "candidates": [fields]}})
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "candidate", [{"median_s": -1.0}, {"speedup": -5.0}, {"median_s": 0.0}, {"speedup": 0}, {"median_s": 1e-3}]
)
def test_a_remembered_choice_with_impossible_times_is_ignored(zoo_home: Path, candidate: dict) -> None:
    # a negative time was trusted: "precision auto: bf16 (-5.00x fp32, remembered)"
    _remember(zoo_home, **candidate)
    choice = optimize_report.remembered("k", "train_speed.json")
    assert (choice is not None) == (candidate == {"median_s": 1e-3})


def test_a_remembered_choices_file_that_is_no_plain_json_file_counts_as_none(zoo_home: Path) -> None:
    # deep nesting stopped every run (RecursionError, naming no file); a FIFO hung it; a huge
    # file was read whole
    path = _remember(zoo_home, "[" * 200_000 + "]" * 200_000)
    assert optimize_report.remembered("k", "train_speed.json") is None
    path.unlink()
    os.mkfifo(path)
    assert optimize_report.remembered("k", "train_speed.json") is None
    path.unlink()
    with open(path, "wb") as file:
        file.truncate(optimize_report.MAX_CACHE_BYTES + 1)
    assert optimize_report.remembered("k", "train_speed.json") is None
    optimize_report.write_cache("k", "fp32", [optimize_report.Candidate("fp32", 0.01, 1.0, passed=True)], path.name)
    assert optimize_report.remembered("k", "train_speed.json")[0] == "fp32"  # replaced by a readable one


def test_the_json_reader_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    # store.files.read_json (configs, indexes, records a user hands zoo) blocked on a FIFO
    from zoo.store.files import read_json

    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(WeightsError, match=r"config\.json is not a file \(a folder, a FIFO or a device\)"):
        read_json(tmp_path / "config.json", 2**20)


def test_class_names_from_folders_and_text_rows_are_printable(tmp_path: Path) -> None:
    # a folder or label named with a newline or escape codes forged lines in messages and the card
    for name in ("cat", "dog\x1b[31m"):
        (tmp_path / "images" / name).mkdir(parents=True)
        Image.new("L", (8, 8)).save(tmp_path / "images" / name / "1.png")
    with pytest.raises(DataError, match=r"images: class folders\[1\] is 'dog\\x1b\[31m': a class name is 1 to 256"):
        open_data(tmp_path / "images")
    rows = tmp_path / "rows.csv"
    rows.write_text('text,label\nhello,cat\nworld,"dog\nzoo: error: forged"\n')
    with pytest.raises(DataError, match=r"rows\.csv, line 3: the label 'label' is 'dog\\nzoo: error: forged'"):
        open_data(rows)


def test_zoo_shards_names_what_a_killed_run_left(tmp_path: Path, capsys) -> None:
    # kill -9 leaves the staging folder in --out: the next run said only "not an empty folder"
    (tmp_path / "s" / ".staging-abc123").mkdir(parents=True)
    x = tmp_path / "x.pt"
    torch.save({"x": torch.rand(4, 1, 8, 8), "y": torch.tensor([0, 1, 0, 1])}, x)
    assert main(["shards", str(x), "--out", str(tmp_path / "s")]) == 2
    error = capsys.readouterr().err
    assert "holds only .staging-abc123, left by a zoo shards run that was killed" in error, error
    assert (tmp_path / "s" / ".staging-abc123").is_dir()  # nothing of it deleted


def test_a_fifo_in_an_image_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / name / "0.png")
    os.mkfifo(tmp_path / "dog" / "x.png")  # opening it would wait for a writer forever
    with pytest.raises(DataError, match=r"dog/x\.png is not a regular file"):
        open_data(tmp_path)
