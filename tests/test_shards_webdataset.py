"""Zoo's shard reader side by side with WebDataset's own (the installed ``webdataset``), on the
same tars: shards `zoo shards` writes read the same in `wds.WebDataset` (keys, files, labels,
pixels, text), shards `wds.TarWriter`/`wds.ShardWriter` write read the same in zoo (keys in
folders, multi-dot and upper-case extensions, long and non-ASCII names, members without an
extension), in the same order, each key once across 2 processes x 2 DataLoader workers.

WebDataset's conventions checked here (``webdataset.tariterators``): a member ``PATH.EXT`` is
sample ``PATH`` (folders included, up to the first dot of the base name), file ``EXT``
lowercased (all of it: ``seg.png``); consecutive members with one key are one sample; a member
without an extension is skipped, as are ``__meta__``-style names; ``__key__`` names the
sample, ``__url__`` its shard; ``.cls`` decodes to an int.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from PIL import Image
from test_shards import image_folder, key, keys_read

from zoo import cli
from zoo.errors import DataError
from zoo.training.data.kinds import open_data
from zoo.training.data.shards.shard_files import Shard, read_samples
from zoo.training.data.shards.shard_source import SampleDecoder, ShardSource, ShardStream

CLASSES = ("ant", "bee", "cow")  # test_shards.image_folder's classes, in order


class Keyed:
    """A decoder that keeps the key: ``(key, decoded sample)`` (a class: workers pickle it)."""

    def __init__(self, decoder: SampleDecoder) -> None:
        self.decoder = decoder

    def __call__(self, record: dict[str, Any]) -> tuple[str, Any]:
        return record["__key__"], self.decoder(record)


def tars(folder: Path) -> list[str]:
    return sorted(str(path) for path in folder.glob("*.tar"))


def wds_samples(urls: list[str], decode: str | None = None) -> list[dict[str, Any]]:
    """Every sample WebDataset reads from ``urls``, in order: raw bytes, or decoded by ``decode``."""
    dataset = wds.WebDataset(urls, shardshuffle=False)
    samples = list(dataset.decode(decode) if decode else dataset)
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in samples]


def same_raw_samples(urls: list[str]) -> dict[str, dict[str, Any]]:
    """Assert zoo's reader groups the tars' members into the samples WebDataset does (keys,
    files, bytes, shard) in the same order; key -> raw sample."""
    theirs = wds_samples(urls)
    ours = [{**record, "__url__": url} for url in urls for record in read_samples(Shard(url))]
    assert [s["__key__"] for s in ours] == [s["__key__"] for s in theirs]
    for mine, peer in zip(ours, theirs):
        assert mine == peer, (mine["__key__"], sorted(mine), sorted(peer))
    by_key = {s["__key__"]: s for s in theirs}
    assert len(by_key) == len(theirs), "a key twice"
    return by_key


def zoo_decoded(source: ShardSource) -> dict[str, Any]:
    """Key -> decoded sample as zoo's training stream gives it (one process, shard order)."""
    assert source.decoder is not None
    pairs = list(ShardStream(source.shards, Keyed(source.decoder)))
    assert len(dict(pairs)) == len(pairs) == source.num_samples
    return dict(pairs)


def same_images(urls: list[str], source: ShardSource, image_ext: dict[str, str]) -> None:
    """Assert zoo's decoded (image, label) of each key is WebDataset's decoded image (the file
    ``image_ext[key]``; ``pill`` gray or ``pil`` RGB, as zoo's channels) and ``cls``, pixel for pixel."""
    theirs = {s["__key__"]: s for s in wds_samples(urls, "pill" if source.in_chans == 1 else "pil")}
    ours = zoo_decoded(source)
    assert set(ours) == set(theirs) == set(image_ext)
    for k, (image, label) in ours.items():
        peer = theirs[k][image_ext[k]]
        assert label == theirs[k]["cls"] and isinstance(theirs[k]["cls"], int)
        assert (image.mode, image.size) == (peer.mode, peer.size)
        assert np.array_equal(np.asarray(image), np.asarray(peer)), k


# ---------------------------------------------------------------------------------------------
# Shards zoo writes, read by WebDataset


def test_webdataset_reads_zoo_image_shards_as_zoo_does(tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "images", per_class=8)
    assert cli.main(["shards", str(folder), "--out", str(tmp_path / "s"), "--shard-size", "5"]) == 0
    urls = tars(tmp_path / "s")
    raw = same_raw_samples(urls)
    assert len(urls) == 5 and len(raw) == 24
    assert all(set(s) == {"__key__", "__url__", "png", "cls"} for s in raw.values())
    truth = {path.read_bytes(): c for c, name in enumerate(CLASSES) for path in (folder / name).iterdir()}
    assert {k: truth[s["png"]] for k, s in raw.items()} == {k: int(s["cls"]) for k, s in raw.items()}
    source = open_data(str(tmp_path / "s"))
    assert source.class_names == list(CLASSES)
    same_images(urls, source, dict.fromkeys(raw, "png"))


@pytest.mark.parametrize("rows", ["csv", "jsonl"])
def test_webdataset_reads_zoo_text_shards_as_zoo_does(tmp_path: Path, rows: str) -> None:
    texts = [f"row {i}, ünïcode" if i % 3 else f"line {i}" for i in range(11)]
    labels = ["yes" if i % 2 else "no" for i in range(11)]
    path = tmp_path / f"rows.{rows}"
    if rows == "csv":
        path.write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in zip(texts, labels)), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in zip(texts, labels)))
    assert cli.main(["shards", str(path), "--out", str(tmp_path / "s"), "--shard-size", "4"]) == 0
    urls = tars(tmp_path / "s")
    raw = same_raw_samples(urls)
    assert all(set(s) == {"__key__", "__url__", "txt", "cls"} for s in raw.values())
    theirs = {s["__key__"]: (s["txt"], s["cls"]) for s in wds_samples(urls, "pil")}
    source = open_data(str(tmp_path / "s"))
    assert source.class_names == ["no", "yes"]
    assert zoo_decoded(source) == theirs
    assert sorted(theirs.values()) == sorted((t, ["no", "yes"].index(y)) for t, y in zip(texts, labels))


# ---------------------------------------------------------------------------------------------
# Shards WebDataset writes, read by zoo (no manifest: zoo scans them)


def encoded(pixels: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def test_zoo_reads_webdataset_shardwriter_shards_as_webdataset_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    (tmp_path / "s").mkdir()
    image_ext = {}
    with wds.ShardWriter(str(tmp_path / "s" / "wds-%06d.tar"), maxcount=7, verbose=0) as sink:
        for i in range(22):
            ext = "jpg" if i % 2 else "png"
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            key_ = f"sample{i:06d}"
            sink.write({"__key__": key_, ext: encoded(pixels, "JPEG" if ext == "jpg" else "PNG"), "cls": i % 3})
            image_ext[key_] = ext
    urls = tars(tmp_path / "s")
    raw = same_raw_samples(urls)
    assert len(urls) == 4 and list(raw) == list(image_ext)
    source = open_data(str(tmp_path / "s"))
    assert source.num_samples == 22 and source.class_names == ["0", "1", "2"] and source.in_chans == 3
    same_images(urls, source, image_ext)


def hand_made_tar(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> None:
    """A tar of ``members`` in this order (a name ending in ``/``: a folder entry)."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_zoo_reads_keys_in_folders_and_multi_dot_extensions_as_webdataset_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    (tmp_path / "s").mkdir()
    long_folder = "a-very-long-folder-name." * 6  # a key over tar's 100-byte name field (pax/GNU headers)
    keys = ["dir.v1/img0001", "dir.v1/img0002", "dir.v2/sub/img0001", f"{long_folder}/img0003", "dïr/ïmg0004"]
    keys += ["__underscored", "plain.v3/x"]  # a key WebDataset reads though it starts with "__"
    image_ext = {}
    with wds.TarWriter(str(tmp_path / "s" / "a-000000.tar"), encoder=False) as sink:
        for i, k in enumerate(keys):
            pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
            png, seg = encoded(pixels, "PNG"), encoded(255 - pixels, "PNG")
            sink.write({"__key__": k, "png": png, "seg.png": seg, "cls": str(i % 2).encode()})
            image_ext[k] = "png"
    # a second shard by hand: folder entries, upper-case extensions, a member with no extension
    # inside a sample, a WebDataset meta file, GNU long names
    members: list[tuple[str, bytes]] = [("__meta__", b"{}"), ("dir.v9/", b"")]
    for i in range(4):
        k = f"dir.v9/{long_folder}/IMG{i:04d}" if i % 2 else f"dir.v9/IMG{i:04d}"
        members += [(f"{k}.PNG", encoded(rng.integers(0, 256, (8, 8), dtype=np.uint8), "PNG"))]
        members += [(f"{k[: k.rindex('/')]}/NOTES", b"no extension: not a sample file")]
        members += [(f"{k}.Seg.Png", encoded(rng.integers(0, 256, (8, 8), dtype=np.uint8), "PNG"))]
        members += [(f"{k}.cls", str(i % 2).encode())]
        image_ext[k] = "png"
    hand_made_tar(tmp_path / "s" / "a-000001.tar", members, fmt=tarfile.GNU_FORMAT)
    urls = tars(tmp_path / "s")
    raw = same_raw_samples(urls)
    assert list(raw) == list(image_ext)
    assert all(set(s) == {"__key__", "__url__", "png", "seg.png", "cls"} for s in raw.values())
    source = open_data(str(tmp_path / "s"))
    assert source.num_samples == 11 and source.in_chans == 1
    same_images(urls, source, image_ext)


# ---------------------------------------------------------------------------------------------
# Order and exactly-once


@pytest.fixture(scope="module")
def webdataset_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 labelled gray PNGs in shards of 5 written by `wds.ShardWriter` (5, 5, 5, 5, 4)."""
    root = tmp_path_factory.mktemp("wds") / "s"
    root.mkdir()
    rng = np.random.default_rng(3)
    with wds.ShardWriter(str(root / "wds-%06d.tar"), maxcount=5, verbose=0) as sink:
        for i in range(24):
            png = encoded(rng.integers(0, 256, (8, 8), dtype=np.uint8), "PNG")
            sink.write({"__key__": f"k{(i * 7) % 24:04d}", "png": png, "cls": i % 2})  # keys not in sorted order
    return root


def test_zoo_streams_samples_in_webdataset_order(webdataset_shards: Path) -> None:
    source = open_data(str(webdataset_shards))
    theirs = [s["__key__"] for s in wds_samples(tars(webdataset_shards))]
    assert list(ShardStream(source.shards, key)) == theirs
    assert theirs != sorted(theirs)  # the order is the tars', not the keys'


def test_two_processes_with_two_workers_read_each_webdataset_key_once(webdataset_shards: Path) -> None:
    source = open_data(str(webdataset_shards))
    theirs = Counter(s["__key__"] for s in wds_samples(tars(webdataset_shards)))
    assert len(theirs) == 24 and set(theirs.values()) == {1}
    stream = ShardStream(source.shards, key, buffer=4)
    ranks = keys_read(stream, world=2, workers=2, epoch=0)
    seen = Counter(k for batches in ranks for batch in batches for k in batch)
    assert seen == theirs
    assert sum(len(batch) for batch in ranks[0]) == sum(len(batch) for batch in ranks[1]) == 12


def test_gzipped_shards_webdataset_reads_are_one_clear_error_in_zoo(tmp_path: Path) -> None:
    """WebDataset reads ``.tar.gz`` shards; zoo streams plain tars and says so, instead of
    calling them damaged (and offering to skip every sample)."""
    png = encoded(np.zeros((8, 8), dtype=np.uint8), "PNG")
    for shard in range(2):
        with wds.TarWriter(str(tmp_path / f"g-{shard:06d}.tar.gz")) as sink:
            for i in range(3):
                sink.write({"__key__": f"s{shard}{i}", "png": png, "cls": i % 2})
    spec = str(tmp_path / "g-{000000..000001}.tar.gz")
    assert [s["__key__"] for s in wds.WebDataset(spec, shardshuffle=False)] == [
        "s00",
        "s01",
        "s02",
        "s10",
        "s11",
        "s12",
    ]
    with pytest.raises(DataError, match=r"g-000000.tar.gz is gzip-compressed .*gunzip it") as error:
        open_data(spec)
    assert "damaged" not in str(error.value) and len(str(error.value).splitlines()) == 1
