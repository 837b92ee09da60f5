"""WebDataset shards: `zoo shards` writes them with a manifest, `--data` streams them, each
sample once per epoch across processes and DataLoader workers, resumed at the right sample,
bad shards one line naming shard and key (or skipped and counted), memory bounded by the
shuffle buffer."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import threading
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from zoo import cli
from zoo.cli.parser import build_parser
from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.data.shards.shard_files import Shard
from zoo.training.data.shards.shard_source import ShardStream, plan
from zoo.training.data.shards.shard_writer import write_shards
from zoo.training.data.tensors.tensor_files import tensor_source
from zoo.training.finetune.options import options_from_args
from zoo.training.loop.loaders import EpochSampler, ShardSampler, build_loader

REPO = Path(__file__).resolve().parent.parent


def image_folder(root: Path, per_class: int = 10, size: int = 8) -> Path:
    """Three classes of small gray PNGs, each class its own brightness."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("ant", "bee", "cow")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 60, size=(size, size), dtype=np.uint8) + 90 * c
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 images in 5 shards of at most 7 (the last holds 2), with their manifest."""
    root = tmp_path_factory.mktemp("shards")
    write_shards(image_folder(root / "images"), root / "shards", shard_size=7)
    return root / "shards"


def key(record: dict) -> str:
    return record["__key__"]


def keys_read(stream: ShardStream, world: int, workers: int, epoch: int, batch: int = 3, skip: int = 0) -> list:
    """The keys each rank's loader yields in one epoch, batch by batch."""
    ranks = []
    for rank in range(world):
        sampler = EpochSampler(stream, num_replicas=world, rank=rank, seed=3)
        sampler.set_epoch(epoch)
        sampler.skip = skip
        loader = build_loader(stream, batch, sampler=sampler, num_workers=workers, collate_fn=list)
        batches = list(loader)
        assert len(batches) == len(loader)
        ranks.append(batches)
    return ranks


def test_each_sample_once_per_epoch_across_processes_and_workers(shards: Path) -> None:
    source = open_data(str(shards / "train-{000000..000004}.tar"))
    assert source.num_samples == 30 and source.class_names == ["ant", "bee", "cow"] and source.in_chans == 1
    stream = ShardStream(source.shards, key, buffer=4)
    orders = []
    for epoch in (0, 1):
        ranks = keys_read(stream, world=2, workers=2, epoch=epoch)
        seen = Counter(k for batches in ranks for batch in batches for k in batch)
        assert len(seen) == 30 and set(seen.values()) == {1}, seen
        assert [len(b) for b in ranks[0]] == [len(b) for b in ranks[1]]  # the processes agree on the batches
        assert ranks == keys_read(stream, world=2, workers=0, epoch=epoch)  # workers change nothing
        orders.append(ranks)
    assert orders[0] != orders[1]  # reshuffled each epoch (shard order and buffer)


def test_a_resumed_epoch_continues_at_the_right_sample(shards: Path) -> None:
    stream = ShardStream(open_data(str(shards)).shards, key, buffer=5)
    whole = keys_read(stream, world=2, workers=2, epoch=1)
    rest = keys_read(stream, world=2, workers=2, epoch=1, skip=2 * 3)
    assert rest == [batches[2:] for batches in whole]


def test_evaluation_shards_match_the_samplers_count(shards: Path) -> None:
    stream = ShardStream(open_data(str(shards)).shards, key)
    seen = []
    for rank in range(4):  # 30 samples over 4 processes: 8, 8, 7, 7 real ones, each padded to 8
        sampler = ShardSampler(stream, num_replicas=4, rank=rank)
        keys = [k for batch in build_loader(stream, 3, sampler=sampler, collate_fn=list) for k in batch]
        assert len(keys) == len(sampler) == 8
        seen += keys[: sampler.num_valid]
    assert sorted(seen) == sorted(stream_keys(stream))
    assert plan([7, 7, 7, 7, 2], None)[0] == [(0, 0, 7), (1, 0, 7), (2, 0, 7), (3, 0, 7), (4, 0, 2)]


def stream_keys(stream: ShardStream) -> list[str]:
    return list(stream)


def test_zoo_finetune_streams_a_brace_range(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        cli.main(["shards", str(image_folder(tmp_path / "images")), "--out", str(tmp_path / "s"), "--shard-size", "8"])
        == 0
    )
    assert "--data '" + str(tmp_path / "s" / "train-{000000..000003}.tar'") in capsys.readouterr().out
    argv = [
        "finetune",
        "resnet20",
        "--data",
        str(tmp_path / "s/train-{000000..000003}.tar"),
        "--out",
        str(tmp_path / "o"),
    ]
    options = ["--max-steps", "3", "--epochs", "2", "--batch-size", "4", "--no-progress", "--no-post-training"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main([*argv, *options, "--no-tensorboard", "--val-fraction", "0.25", "--num-workers", "1"]) == 0
    metrics = json.loads((tmp_path / "o/metrics.json").read_text())
    assert metrics["history"][-1]["step"] == 3
    card = (tmp_path / "o/README.md").read_text()
    assert "shards" in card
    # the shuffle buffer from the command line: checked, and what the run reads through
    with pytest.raises(SystemExit) as refused:
        cli.main([*argv, *options, "--shuffle-buffer", "-1"])
    assert refused.value.code == 2 and "--shuffle-buffer: must be from 0 to 1000000" in capsys.readouterr().err
    parsed = build_parser(["finetune"]).parse_args([*argv, "--shuffle-buffer", "7"])
    buffer = options_from_args(parsed).shuffle_buffer
    assert buffer == 7 and open_data(parsed.data, shuffle_buffer=buffer).buffer == 7


def test_text_rows_and_tensors_become_shards(tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("text,label\n" + "".join(f"row {i},{'yes' if i % 2 else 'no'}\n" for i in range(9)))
    write_shards(rows, tmp_path / "text", shard_size=4, seed=None)  # in the file's order
    source = open_data(str(tmp_path / "text"))
    assert source.kind == "text" and source.class_names == ["no", "yes"]
    train, _ = source.split(0.0)
    samples = list(train)
    assert samples[1] == ("row 1", 1) and len(samples) == 9
    assert source.collate_fn(samples[:2])["input_ids"].shape[0] == 2
    torch.save({"x": torch.randn(6, 5), "y": torch.tensor([0, 1, 2, 0, 1, 2])}, tmp_path / "t.pt")
    write_shards(tmp_path / "t.pt", tmp_path / "tensors", shard_size=4, seed=None)
    x, y = next(iter(open_data(str(tmp_path / "tensors")).full()))
    assert torch.equal(x, torch.load(tmp_path / "t.pt")["x"][0]) and y == 0


def test_local_shards_without_a_manifest_are_scanned(shards: Path, tmp_path: Path) -> None:
    for tar in shards.glob("*.tar"):
        (tmp_path / tar.name).write_bytes(tar.read_bytes())
    source = open_data(str(tmp_path))
    assert source.num_samples == 30 and source.class_names == ["0", "1", "2"] and source.image_size == (8, 8)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_shards_stream_over_http(shards: Path) -> None:
    handler = functools.partial(_Quiet, directory=str(shards))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        source = open_data(base + "train-{000000..000001}.tar::" + str(shards / "train-000002.tar"))
        assert source.num_samples == 21
        assert stream_keys(ShardStream(source.shards, key)) == [f"{i:09d}" for i in range(21)]
        with pytest.raises(DataError, match="train-000009.tar does not exist"):
            list(ShardStream([Shard(base + "train-000009.tar", 1)], key))
    finally:
        server.shutdown()
        server.server_close()


def copy_shards(shards: Path, to: Path) -> Path:
    to.mkdir()
    for path in shards.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


def read_all(folder: Path, skip_bad: bool = False) -> list:
    source = open_data(str(folder))
    source.skip_bad = skip_bad
    return list(source.full())


def test_bad_shards_name_the_shard_and_key_or_are_skipped(shards: Path, tmp_path: Path, caplog) -> None:
    truncated = copy_shards(shards, tmp_path / "truncated")
    tar = truncated / "train-000001.tar"
    tar.write_bytes(tar.read_bytes()[:3000])  # sample 7 whole, 8 cut
    with pytest.raises(DataError, match=r"train-000001.tar is damaged at sample '000000008'"):
        read_all(truncated)
    with caplog.at_level("WARNING"):
        samples = read_all(truncated, skip_bad=True)
    assert len(samples) == 30 and "6 bad samples skipped" in caplog.text

    assert open_data(str(truncated), molecules=MoleculeOptions(skip_bad_rows=True)).skip_bad  # --skip-bad-rows

    unlabelled = copy_shards(shards, tmp_path / "unlabelled")
    _rewrite(unlabelled / "train-000000.tar", drop="000000003.cls")
    with pytest.raises(DataError, match=r"train-000000.tar, sample '000000003' has no label"):
        read_all(unlabelled)
    garbled = copy_shards(shards, tmp_path / "garbled")
    _rewrite(garbled / "train-000000.tar", replace=("000000004.png", b"not a png"))
    with pytest.raises(DataError, match=r"train-000000.tar, sample '000000004' \(png\) is not a readable image"):
        read_all(garbled)


def test_a_bad_shard_read_by_a_loader_worker_is_one_line(shards: Path, tmp_path: Path, capsys) -> None:
    truncated = copy_shards(shards, tmp_path / "truncated")
    (truncated / "train-000000.tar").write_bytes((truncated / "train-000000.tar").read_bytes()[:5000])
    argv = ["finetune", "resnet20", "--data", str(truncated), "--out", str(tmp_path / "o"), "--max-steps", "2"]
    options = ["--batch-size", "4", "--num-workers", "1", "--no-progress", "--no-post-training", "--no-tensorboard"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main([*argv, *options, "--precision", "fp32"]) == 2
    error = capsys.readouterr().err.strip()
    assert re.match(r"zoo: error: shard \S+/train-000000.tar is damaged at sample '00000000\d'", error), error
    assert "Traceback" not in error and len(error.splitlines()) == 1


def _rewrite(tar_path: Path, drop: str = "", replace: tuple[str, bytes] = ("", b"")) -> None:
    """Rewrite a shard without member ``drop`` / with ``replace``'s bytes, and its manifest entry."""
    members = []
    with tarfile.open(tar_path) as tar:
        for member in tar:
            data = tar.extractfile(member).read()
            if member.name != drop:
                members.append((member, replace[1] if member.name == replace[0] else data))
    with tarfile.open(tar_path, "w") as tar:
        for member, data in members:
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    manifest = json.loads((tar_path.parent / "manifest.json").read_text())
    entry = next(e for e in manifest["shards"] if e["name"] == tar_path.name)
    entry["sha256"] = hashlib.sha256(tar_path.read_bytes()).hexdigest()
    (tar_path.parent / "manifest.json").write_text(json.dumps(manifest))


def test_the_manifest_is_verified_and_checked(shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    changed = copy_shards(shards, tmp_path / "changed")
    data = bytearray((changed / "train-000002.tar").read_bytes())
    data[-1] = 1  # the end padding: every sample still reads
    (changed / "train-000002.tar").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"train-000002.tar has sha256 .* its manifest says"):
        read_all(changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["shards"][0]["name"] = "../../etc/passwd"
    (changed / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["finetune", "resnet20", "--data", str(changed), "--out", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "shards[0].name should be a file name beside the manifest" in error


def test_a_sample_appended_after_the_counted_ones_is_refused(shards: Path, tmp_path: Path) -> None:
    """Hardening round 5: a sample appended to a shard's tar after those its manifest counts was
    never read, so the shard was never verified (sha256, count) and trained as it was."""
    appended = copy_shards(shards, tmp_path / "appended")
    with tarfile.open(appended / "train-000000.tar") as tar:
        png = tar.extractfile(next(m for m in tar if m.name.endswith(".png"))).read()
    with tarfile.open(appended / "train-000000.tar", "a") as tar:
        for name, data in (("extra.png", png), ("extra.cls", b"0")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    said = r"train-000000.tar holds more samples than the 7 its manifest counts \(sample 'extra' follows them"
    for skip_bad in (False, True):  # a sample the manifest lacks is no bad sample to skip
        with pytest.raises(DataError, match=said):
            read_all(appended, skip_bad)


def test_zoo_shards_takes_the_label_field_it_advises(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Hardening round 5: on an image list of several columns zoo shards advised --label-field,
    which it did not take; it takes it now, as zoo finetune does, and refuses labels that are not
    one class per sample in a line."""
    rng = np.random.default_rng(0)
    rows = ["file_name,species,colour,cat,dog"]
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(tmp_path / f"{i}.png")
        rows.append(f"{i}.png,{'ab'[i % 2]},{'xyz'[i % 3]},{i % 2},{1 - i % 2}")
    listing = tmp_path / "list.csv"
    listing.write_text("\n".join(rows) + "\n")
    assert cli.main(["shards", str(listing), "--out", str(tmp_path / "s")]) == 2
    assert "name the label with --label-field" in capsys.readouterr().err
    assert cli.main(["shards", str(listing), "--out", str(tmp_path / "s"), "--label-field", "colour"]) == 0
    assert open_data(str(tmp_path / "s")).class_names == ["x", "y", "z"]
    bits = tmp_path / "bits.csv"
    bits.write_text("".join(line.split(",", 3)[0] + "," + line.split(",", 3)[3] + "\n" for line in rows))
    assert cli.main(["shards", str(bits), "--out", str(tmp_path / "b")]) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert "shards hold one class per sample, and this data is multi-label; name a column of classes" in error
    assert "with --label-field" in error and not (tmp_path / "b").exists()


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import torch
    import torch.nn as nn
    from zoo.training.data.kinds import open_data
    from zoo.training.loop.trainer import Trainer, TrainConfig

    torch.set_num_threads(1)
    source = open_data(sys.argv[1])
    source.buffer = 16  # samples of 256 KiB: 4 MiB of shuffle buffer (1000 would hold them all)
    train, _ = source.split(0.0)
    model = nn.Sequential(nn.Flatten(), nn.LazyLinear(2))
    model(torch.zeros(1, 1, 256, 256))
    config = TrainConfig(epochs=1, batch_size=8, optimizer="sgd", lr=0.01, scheduler="none", precision="fp32", progress=False,
                         tensorboard=False, plot=False)
    trainer = Trainer(model, config)
    limit = int(sys.argv[2]) * 2**20
    used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + limit, used + limit))
    try:
        bytearray(int(sys.argv[3]))  # the data set in memory does not fit
        print("the limit did not hold")
    except MemoryError:
        pass
    trainer.fit(train)
    print("trained", trainer.state.global_step)
    """
)


def test_memory_is_bounded_by_the_shuffle_buffer_not_the_data(tmp_path: Path) -> None:
    """144 MiB of shards train under an address-space limit of 96 MiB above the start."""
    x = torch.from_numpy(np.random.default_rng(0).random((576, 1, 256, 256), dtype=np.float32))
    write_shards(tensor_source(x, torch.arange(576) % 2, None, "noise"), tmp_path / "big", shard_size=96)
    del x
    size = sum(p.stat().st_size for p in (tmp_path / "big").glob("*.tar"))
    assert size > 144 * 2**20
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big"), "96", str(size)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["trained", "72"]
