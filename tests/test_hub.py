"""Tests of the verified weight store (zoo.store.download) against a local HTTP server."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

import zoo.store.download as hub
import zoo.store.http_download as http_download
from zoo.store.download import (
    ChecksumError,
    DownloadError,
    WeightsError,
    WeightsNotFoundError,
    fetch,
    fetch_state_dict,
    hash_prefix_from_filename,
    verify_file,
)
from zoo.store.state_dict_files import load_state_dict_file, unwrap_state_dict


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payload(size: int = 3000, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def cache_files(home: Path, sub: str = "downloads") -> list[str]:
    """Every entry of a cache subdirectory, hidden temporary files included."""
    folder = home / sub
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def corrupt_keeping_size(path: Path) -> None:
    """Flip the first byte and move the mtime, as a bit rot or a partial overwrite would."""
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert path.stat().st_size == stat.st_size


# ------------------------------------------------------------------ small helpers


def test_zoo_home_defaults_to_user_cache_and_is_created_when_written(monkeypatch, tmp_path):
    monkeypatch.delenv("ZOO_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.zoo_home() == tmp_path / ".cache" / "zoo"
    hub.verify_file(Path(hub.__file__), None)  # writes a record
    assert (tmp_path / ".cache" / "zoo" / "records").is_dir()


def test_zoo_home_follows_env_and_reading_creates_nothing(zoo_home):
    assert not zoo_home.exists()
    assert hub.zoo_home() == zoo_home
    assert not zoo_home.exists()


def test_zoo_home_pointing_at_a_file_is_named(monkeypatch, tmp_path):
    (tmp_path / "home").write_text("not a folder")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    assert len(verify_file(Path(hub.__file__), None)) == 64  # records are a cache: verifying needs none
    with pytest.raises(WeightsError, match=r"ZOO_HOME=.*home is a file, not a folder"):
        hub.fetch("http://127.0.0.1:9/w.safetensors", sha256=None)  # a download needs the cache


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture
def read_only_cache(zoo_home, monkeypatch):
    """The cache folder made read-only. Root ignores permission bits, so for root the check zoo
    makes (os.access) is answered as a read-only mount would answer it; either way the test
    asserts that nothing in the cache changed."""

    def make() -> dict[str, int]:
        for path in [zoo_home, *zoo_home.rglob("*")]:
            if path.is_dir():
                path.chmod(0o555)
        if os.geteuid() == 0:
            real = os.access
            monkeypatch.setattr(
                os,
                "access",
                lambda p, mode, **kw: (
                    False if mode & os.W_OK and str(p).startswith(str(zoo_home)) else real(p, mode, **kw)
                ),
            )
        return snapshot(zoo_home)

    yield make
    for path in [zoo_home, *zoo_home.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)


def test_read_only_cache_serves_verified_files_and_writes_nothing(http_server, zoo_home, read_only_cache):
    data = payload()
    url = http_server.add("blob.bin", data)
    path = fetch(url, sha256=sha(data), progress=False)
    expected, blob = _checkpoint()
    converted = fetch_state_dict(http_server.add("net.pth", blob), sha256=sha(blob), progress=False)
    before = read_only_cache()
    assert fetch(url, sha256=sha(data), progress=False) == path
    assert fetch_state_dict(f"{http_server.base_url}/net.pth", sha256=sha(blob), progress=False) == converted
    assert snapshot(zoo_home) == before
    with pytest.raises(WeightsError, match="Set ZOO_HOME to a writable folder"):
        fetch(http_server.add("other.bin", data), sha256=sha(data), progress=False)
    corrupt_keeping_size(path)
    with pytest.raises(ChecksumError, match=f"delete {path}"):
        fetch(url, sha256=sha(data), progress=False)


def test_read_only_cache_verifies_bundled_weights(zoo_home, read_only_cache, tmp_path):
    """verify_file of a file outside the cache (as bundled weights are) must not need to write a record."""
    data = payload()
    (tmp_path / "bundled.bin").write_bytes(data)
    zoo_home.mkdir()
    before = read_only_cache()
    assert verify_file(tmp_path / "bundled.bin", sha(data)) == sha(data)
    assert snapshot(zoo_home) == before


def test_a_corrupt_record_does_not_fail_a_good_file(zoo_home, tmp_path):
    data = payload()
    path = tmp_path / "good.bin"
    path.write_bytes(data)
    verify_file(path, sha(data))
    (record,) = (zoo_home / "records").iterdir()
    fields = json.loads(record.read_text())
    record.write_text(json.dumps({**fields, "sha256": "0" * 64}))  # wrong digest, same size and mtime
    assert verify_file(path, sha(data)) == sha(data)
    record.write_text("{not json")
    assert verify_file(path, sha(data)) == sha(data)


def test_a_converted_file_without_a_record_is_not_trusted(http_server, zoo_home, monkeypatch):
    expected, blob = _checkpoint()
    url = http_server.add("net.pth", blob)
    path = fetch_state_dict(url, sha256=sha(blob), progress=False)
    corrupt_keeping_size(path)
    for record in (zoo_home / "records").iterdir():
        record.unlink()
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(ChecksumError, match=f"no valid verification record.*delete {path}"):
        fetch_state_dict(url, sha256=sha(blob), progress=False)
    monkeypatch.delenv("ZOO_OFFLINE")
    with pytest.warns(UserWarning, match="no valid verification record"):
        assert fetch_state_dict(url, sha256=sha(blob), progress=False) == path
    _assert_tensors_equal(load_file(path), expected)


@pytest.mark.parametrize(
    ("value", "offline"),
    [("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("0", False), ("no", False), ("", False)],
)
def test_is_offline(monkeypatch, value, offline):
    monkeypatch.setenv("ZOO_OFFLINE", value)
    assert hub.is_offline() is offline


def test_is_offline_unset():
    assert hub.is_offline() is False


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("https://download.pytorch.org/models/resnet50-0676ba61.pth", "0676ba61"),
        ("resnet50-0676BA61.pth", "0676ba61"),
        ("https://host/x/efficientnet_b0_rwightman-7f5810bc.pth?download=1", "7f5810bc"),
        ("model-abcdef0123456789.pth.tar", "abcdef0123456789"),
        ("resnet50.pth", None),
        ("resnet50-0676ba6.pth", None),  # 7 hex characters are too few
        ("model-00001-of-00002.safetensors", None),
        ("resnet50-0676ba61", None),  # no extension: not the torch.hub convention
        ("net-0676ba6x.pth", None),
    ],
)
def test_hash_prefix_from_filename(name, prefix):
    assert hash_prefix_from_filename(name) == prefix


def test_verify_file_accepts_digest_or_prefix_and_records_it(zoo_home, tmp_path):
    data = payload()
    path = tmp_path / "w.bin"
    path.write_bytes(data)
    digest = sha(data)
    assert verify_file(path, digest) == digest
    assert verify_file(path, digest[:8].upper()) == digest
    assert verify_file(path, None) == digest
    record_name = hashlib.sha256(str(path.resolve()).encode()).hexdigest() + ".json"
    record = json.loads((zoo_home / "records" / record_name).read_text())
    assert record["sha256"] == digest
    assert record["size"] == len(data)
    assert record["mtime_ns"] == path.stat().st_mtime_ns


def test_verify_file_mismatch_and_bad_expectations(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(payload())
    wrong = sha(b"something else")
    with pytest.raises(ChecksumError) as info:
        verify_file(path, wrong)
    message = str(info.value)
    assert str(path) in message and wrong in message and sha(payload()) in message
    assert "delete" in message
    with pytest.raises(ValueError, match="at least 8"):
        verify_file(path, sha(payload())[:7])
    with pytest.raises(ValueError, match="hex"):
        verify_file(path, "z" * 64)
    with pytest.raises(WeightsNotFoundError):
        verify_file(tmp_path / "missing.bin", None)


def test_verify_file_rehashes_only_when_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "w.bin"
    path.write_bytes(payload())
    calls = []
    real_hash = hub.sha256_file
    monkeypatch.setattr(hub, "sha256_file", lambda p: calls.append(p) or real_hash(p))
    verify_file(path, None)
    verify_file(path, None)
    assert len(calls) == 1
    corrupt_keeping_size(path)
    with pytest.raises(ChecksumError):
        verify_file(path, sha(payload()))
    assert len(calls) == 2


@pytest.mark.parametrize("url", ["file:///tmp/w.pth", "/tmp/w.pth", "ftp://host/w.pth", "w.pth"])
def test_fetch_accepts_http_only(url):
    with pytest.raises(ValueError, match="http"):
        fetch(url, sha256=None)


def test_fetch_rejects_unusable_file_names(http_server):
    url = http_server.add("dir/", b"x")
    with pytest.raises(ValueError, match="filename="):
        fetch(url, sha256=None)
    with pytest.raises(ValueError, match="filename="):
        fetch(url, sha256=None, filename="../escape.bin")
    assert http_server.requests == []


# ---------------------------------------------------------------------- downloads


@pytest.mark.filterwarnings("error")  # a verified file must not warn
def test_fetch_verifies_hash_prefix_in_file_name(http_server, zoo_home):
    data = payload()
    name = f"tiny-{sha(data)[:8]}.bin"
    url = http_server.add(name, data)
    path = fetch(url, sha256=None, progress=False)
    assert path == zoo_home / "downloads" / name
    assert path.read_bytes() == data
    assert cache_files(zoo_home) == [name]

    bad = http_server.add("tiny-0badc0de.bin", data)
    with pytest.raises(ChecksumError, match="0badc0de"):
        fetch(bad, sha256=None, progress=False)
    assert cache_files(zoo_home) == [name]


@pytest.mark.filterwarnings("error")
def test_fetch_with_full_sha256_and_custom_file_name(http_server, zoo_home):
    data = payload()
    url = http_server.add("weights/model.bin", data)
    path = fetch(url, sha256=sha(data).upper(), filename="mine.bin", progress=False)
    assert path == zoo_home / "downloads" / "mine.bin"
    assert path.read_bytes() == data


def test_refetch_is_served_from_cache_without_rehashing(http_server, zoo_home, monkeypatch, capfd):
    data = payload(3 * 1024 * 1024 + 17)  # several chunks
    url = http_server.add("big.bin", data)
    first = fetch(url, sha256=sha(data), progress=True)
    assert "big.bin" in capfd.readouterr().err  # the progress bar was shown

    def must_not_hash(path):
        raise AssertionError(f"{path} was re-read although its record matches")

    monkeypatch.setattr(hub, "sha256_file", must_not_hash)
    second = fetch(url, sha256=sha(data), progress=False)
    assert second == first
    assert http_server.requests == ["/big.bin"]
    assert verify_file(first, sha(data)) == sha(data)


def test_checksum_mismatch_is_not_retried_and_leaves_nothing(http_server, zoo_home):
    data = payload()
    url = http_server.add("w.bin", data)
    wrong = sha(b"the published file")
    with pytest.raises(ChecksumError) as info:
        fetch(url, sha256=wrong, progress=False, retries=3)
    message = str(info.value)
    assert url in message and wrong in message and sha(data) in message
    assert http_server.requests == ["/w.bin"]
    assert cache_files(zoo_home) == []
    assert cache_files(zoo_home, "records") == []


def test_truncated_transfer_raises_and_leaves_nothing(http_server, zoo_home):
    data = payload(10_000)
    url = http_server.add("w.bin", data, mode="truncate")
    with pytest.raises(DownloadError, match="truncated") as info:
        fetch(url, sha256=sha(data), progress=False, retries=1)
    assert url in str(info.value)
    assert http_server.requests == ["/w.bin"]
    assert cache_files(zoo_home) == []
    assert cache_files(zoo_home, "records") == []

    with pytest.raises(DownloadError, match="2 attempt"):
        fetch(url, sha256=sha(data), progress=False, retries=2)
    assert len(http_server.requests) == 3
    assert cache_files(zoo_home) == []


def test_unverifiable_truncation_is_still_caught(http_server, zoo_home):
    """Without any expected hash, Content-Length is the only guard against a short file."""
    url = http_server.add("w.bin", payload(), mode="truncate")
    with pytest.raises(DownloadError, match="truncated"):
        fetch(url, sha256=None, progress=False, retries=1)
    assert cache_files(zoo_home) == []


def test_truncate_once_is_retried(http_server, zoo_home):
    data = payload(10_000)
    url = http_server.add("w.bin", data, mode="truncate_once")
    path = fetch(url, sha256=sha(data), progress=False, retries=3)
    assert path.read_bytes() == data
    assert http_server.requests == ["/w.bin", "/w.bin"]
    assert cache_files(zoo_home) == ["w.bin"]


def test_server_error_is_retried(http_server, zoo_home):
    data = payload()
    url = http_server.add("w.bin", data, mode="error500_once")
    assert fetch(url, sha256=sha(data), progress=False, retries=2).read_bytes() == data
    assert http_server.requests == ["/w.bin", "/w.bin"]

    once = http_server.add("x.bin", data, mode="error500_once")
    with pytest.raises(DownloadError, match="500") as info:
        fetch(once, sha256=sha(data), progress=False, retries=1)
    assert once in str(info.value)
    assert cache_files(zoo_home) == ["w.bin"]


def test_not_found_is_not_retried(http_server, zoo_home):
    url = http_server.base_url + "/missing-0676ba61.pth"
    with pytest.raises(DownloadError, match="not found") as info:
        fetch(url, sha256=None, progress=False, retries=3)
    assert url in str(info.value) and "404" in str(info.value)
    assert http_server.requests == ["/missing-0676ba61.pth"]
    assert cache_files(zoo_home) == []


def test_connection_refused_is_retried_then_reported(http_server, zoo_home, monkeypatch):
    url = http_server.base_url + "/w.bin"
    http_server.close()  # nothing listens on the port any more
    sleeps = []
    monkeypatch.setattr(hub.time, "sleep", sleeps.append)
    with pytest.raises(DownloadError, match="3 attempt") as info:
        fetch(url, sha256=None, progress=False, retries=3)
    assert url in str(info.value)
    assert len(sleeps) == 2  # backoff between the three attempts
    assert sleeps[0] < sleeps[1] <= 1.0


def test_interrupted_download_leaves_nothing(http_server, zoo_home, monkeypatch):
    class InterruptedBar(tqdm):
        def update(self, n=1):
            raise KeyboardInterrupt

    monkeypatch.setattr(http_download, "tqdm", InterruptedBar)
    data = payload()
    url = http_server.add("w.bin", data)
    with pytest.raises(KeyboardInterrupt):
        fetch(url, sha256=sha(data), progress=False)
    assert cache_files(zoo_home) == []
    assert cache_files(zoo_home, "records") == []


def test_unverified_download_warns_and_later_changes_are_detected(http_server, zoo_home):
    data = payload()
    url = http_server.add("plain.bin", data)
    with pytest.warns(UserWarning, match="could not be verified"):
        path = fetch(url, sha256=None, progress=False)
    assert path.read_bytes() == data

    corrupt_keeping_size(path)
    with pytest.warns(UserWarning) as caught:
        assert fetch(url, sha256=None, progress=False).read_bytes() == data
    messages = [str(w.message) for w in caught]
    assert any("failed verification" in m for m in messages)
    assert any("could not be verified" in m for m in messages)  # the new copy is unverified too
    assert http_server.requests == ["/plain.bin", "/plain.bin"]


# -------------------------------------------------------------- ETag verification


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    "headers",
    [
        lambda d: {"X-Linked-Etag": f'"{d}"', "ETag": '"0123456789abcdef"'},
        lambda d: {"ETag": f'W/"{d.upper()}"'},
        lambda d: {"X-Linked-Etag": d},
    ],
    ids=["x-linked-etag", "weak-etag", "unquoted"],
)
def test_etag_sha256_verifies_download(http_server, zoo_home, headers):
    data = payload()
    url = http_server.add("model.safetensors", data, headers=headers(sha(data)))
    assert fetch(url, sha256=None, progress=False).read_bytes() == data


def test_etag_sha256_mismatch_is_rejected(http_server, zoo_home):
    data = payload()
    url = http_server.add("model.safetensors", data, headers={"X-Linked-Etag": f'"{sha(b"other")}"'})
    with pytest.raises(ChecksumError, match=sha(b"other")):
        fetch(url, sha256=None, progress=False, retries=3)
    assert http_server.requests == ["/model.safetensors"]
    assert cache_files(zoo_home) == []


@pytest.mark.filterwarnings("error")  # the good download must not warn "could not be verified"
def test_x_linked_etag_on_a_redirect_is_used(http_server, zoo_home):
    """Hugging Face sends the sha256 on its 302 to the CDN, not on the CDN's response."""
    data = payload()
    cdn = http_server.add("cdn/blob", data)
    bad = http_server.add_redirect("bad/model.safetensors", cdn, headers={"X-Linked-Etag": f'"{sha(b"x")}"'})
    with pytest.raises(ChecksumError):
        fetch(bad, sha256=None, progress=False)
    assert cache_files(zoo_home) == []

    good = http_server.add_redirect("good/model.safetensors", cdn, headers={"X-Linked-Etag": f'"{sha(data)}"'})
    assert fetch(good, sha256=None, progress=False).read_bytes() == data


# ------------------------------------------------------------------ cache and offline


def test_offline_missing_file_names_path_url_and_hash(http_server, zoo_home, monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "TRUE")
    digest = sha(payload())
    url = http_server.add("w.bin", payload())
    with pytest.raises(WeightsNotFoundError) as info:
        fetch(url, sha256=digest, progress=False)
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    for part in (str(zoo_home / "downloads" / "w.bin"), url, digest, "ZOO_OFFLINE=1"):
        assert part in message
    assert http_server.requests == []

    with pytest.raises(WeightsNotFoundError, match="prefix 0676ba61"):
        fetch(http_server.base_url + "/resnet50-0676ba61.pth", sha256=None)
    assert http_server.requests == []


def test_offline_uses_cached_file(http_server, zoo_home, monkeypatch):
    data = payload()
    url = http_server.add("w.bin", data)
    path = fetch(url, sha256=sha(data), progress=False)
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    assert fetch(url, sha256=sha(data), progress=False) == path
    assert http_server.requests == ["/w.bin"]


def test_offline_file_placed_by_hand_is_verified(http_server, zoo_home, monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    data = payload()
    url = http_server.add("w.bin", data)
    (zoo_home / "downloads").mkdir(parents=True)
    (zoo_home / "downloads" / "w.bin").write_bytes(data)
    assert fetch(url, sha256=sha(data)[:10], progress=False).read_bytes() == data
    with pytest.raises(ChecksumError, match="ZOO_OFFLINE"):
        fetch(url, sha256=sha(b"other"), progress=False)
    assert http_server.requests == []


def test_corrupted_cached_file_is_detected_and_downloaded_again(http_server, zoo_home):
    data = payload()
    url = http_server.add("w.bin", data)
    path = fetch(url, sha256=sha(data), progress=False)
    corrupt_keeping_size(path)
    with pytest.warns(UserWarning, match="failed verification"):
        again = fetch(url, sha256=sha(data), progress=False)
    assert again == path and path.read_bytes() == data
    assert http_server.requests == ["/w.bin", "/w.bin"]
    assert cache_files(zoo_home) == ["w.bin"]


def test_corrupted_cached_file_offline_raises(http_server, zoo_home, monkeypatch):
    data = payload()
    url = http_server.add("w.bin", data)
    path = fetch(url, sha256=sha(data), progress=False)
    corrupt_keeping_size(path)
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(ChecksumError, match="ZOO_OFFLINE=1") as info:
        fetch(url, sha256=sha(data), progress=False)
    assert str(path) in str(info.value)
    assert http_server.requests == ["/w.bin"]


# Loads zoo/store/download.py by itself: importing the `zoo` package would also import every model
# (and torchvision), tripling the start-up time of each child for nothing.
_CHILD = """
import importlib.util, sys, time
from pathlib import Path
hub_file, url, digest, ready, go = sys.argv[1:]
spec = importlib.util.spec_from_file_location("zoo_hub", hub_file)
hub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hub)
Path(ready).touch()
deadline = time.monotonic() + 60
while not Path(go).exists():
    if time.monotonic() > deadline:
        sys.exit("the test never said go")
    time.sleep(0.005)
print(hub.fetch(url, sha256=digest, progress=False))
"""


def test_two_processes_fetching_the_same_file(http_server, zoo_home, tmp_path):
    data = payload(2 * 1024 * 1024)
    # The slow body keeps the first download going while the second process arrives.
    url = http_server.add("shared.bin", data, delay=0.5)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, hub.__file__, url, sha(data), str(r), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        results = [child.communicate(timeout=60) for child in children]
    finally:
        for child in children:
            child.kill()
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err
        assert Path(out.strip()) == zoo_home / "downloads" / "shared.bin"
    assert (zoo_home / "downloads" / "shared.bin").read_bytes() == data
    assert cache_files(zoo_home) == ["shared.bin"]  # no temporary files left
    assert http_server.requests == ["/shared.bin"]  # the second process waited and reused it


# ------------------------------------------------------------------- state dicts


def _checkpoint() -> tuple[dict[str, torch.Tensor], bytes]:
    """A torch.save'd DDP checkpoint with tied, non-contiguous and view tensors, and the
    tensors it should convert to."""
    torch.manual_seed(0)
    embed = torch.randn(5, 3)
    wide = torch.randn(3, 8)
    storage = torch.arange(12.0)
    published = {
        "module.embed.weight": embed,
        "module.head.weight": embed,  # tied: shares memory with embed
        "module.proj.weight": wide.t(),  # non-contiguous
        "module.a": storage[:6],  # views of one storage
        "module.b": storage[6:],
        "module.bn.num_batches_tracked": torch.tensor(7),
    }
    buffer = io.BytesIO()
    torch.save({"state_dict": published, "epoch": 3, "arch": "net"}, buffer)
    expected = {k.removeprefix("module."): v.clone() for k, v in published.items()}
    return expected, buffer.getvalue()


def _assert_tensors_equal(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_fetch_state_dict_converts_a_pickle_once(http_server, zoo_home, monkeypatch):
    expected, blob = _checkpoint()
    name = f"net-{sha(blob)[:8]}.pth"
    url = http_server.add(name, blob)
    path = fetch_state_dict(url, sha256=sha(blob), progress=False)

    assert path == zoo_home / "converted" / f"net-{sha(blob)[:8]}.safetensors"
    _assert_tensors_equal(load_file(path), expected)
    with safe_open(path, framework="pt") as f:
        assert f.metadata()["zoo.source_sha256"] == sha(blob)
    assert cache_files(zoo_home) == []  # the pickle is gone
    assert cache_files(zoo_home, "converted") == [path.name]

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called for an already converted file")

    monkeypatch.setattr(torch, "load", no_unpickling)
    assert fetch_state_dict(url, sha256=sha(blob), progress=False) == path
    assert fetch_state_dict(url, sha256=None, progress=False) == path  # prefix in the name
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    assert fetch_state_dict(url, sha256=sha(blob), progress=False) == path
    assert http_server.requests == [f"/{name}"]


def test_fetch_state_dict_rebuilds_a_corrupted_conversion(http_server, zoo_home):
    expected, blob = _checkpoint()
    url = http_server.add("net.pth", blob)
    path = fetch_state_dict(url, sha256=sha(blob), progress=False)
    corrupt_keeping_size(path)
    with pytest.warns(UserWarning, match="failed verification"):
        assert fetch_state_dict(url, sha256=sha(blob), progress=False) == path
    _assert_tensors_equal(load_file(path), expected)
    assert http_server.requests == ["/net.pth", "/net.pth"]


def test_fetch_state_dict_rebuilds_a_conversion_of_another_source(http_server, zoo_home):
    _, old_blob = _checkpoint()
    new = {"w": torch.ones(2, 2)}
    buffer = io.BytesIO()
    torch.save(new, buffer)
    new_blob = buffer.getvalue()
    old_url = http_server.add("v1/net.pth", old_blob)
    new_url = http_server.add("v2/net.pth", new_blob)
    fetch_state_dict(old_url, sha256=sha(old_blob), progress=False)
    with pytest.warns(UserWarning, match="converted from a source"):
        path = fetch_state_dict(new_url, sha256=sha(new_blob), progress=False)
    _assert_tensors_equal(load_file(path), new)


def test_fetch_state_dict_returns_published_safetensors(http_server, zoo_home):
    tensors = {"w": torch.randn(3)}
    file = zoo_home.parent / "src.safetensors"
    save_file(tensors, file)
    blob = file.read_bytes()
    url = http_server.add("model.safetensors", blob)
    path = fetch_state_dict(url, sha256=sha(blob), progress=False)
    assert path == zoo_home / "downloads" / "model.safetensors"
    _assert_tensors_equal(load_state_dict_file(path), tensors)
    assert cache_files(zoo_home, "converted") == []


class _Payload:
    """Unpickling this runs os.mkdir(marker): stands in for arbitrary code in a pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def test_load_state_dict_file_refuses_arbitrary_code(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "evil.pth"
    torch.save({"w": torch.ones(2), "hook": _Payload(marker)}, path)
    with pytest.raises(WeightsError, match="refuses to unpickle arbitrary code") as info:
        load_state_dict_file(path)
    assert "mkdir" in str(info.value)  # names the offending global
    assert not marker.exists()


def test_load_state_dict_file_reads_pickles_and_safetensors(tmp_path):
    tensors = {"conv.weight": torch.randn(2, 3), "conv.bias": torch.randn(2)}
    torch.save({"model": {f"_orig_mod.{k}": v for k, v in tensors.items()}}, tmp_path / "a.pt")
    _assert_tensors_equal(load_state_dict_file(tmp_path / "a.pt"), tensors)
    save_file(tensors, tmp_path / "b.safetensors")
    _assert_tensors_equal(load_state_dict_file(str(tmp_path / "b.safetensors")), tensors)

    (tmp_path / "broken.pth").write_bytes(payload())
    with pytest.raises(WeightsError, match="broken.pth"):
        load_state_dict_file(tmp_path / "broken.pth")
    with pytest.raises(WeightsNotFoundError):
        load_state_dict_file(tmp_path / "missing.pth")


def test_unwrap_state_dict():
    w = torch.ones(1)
    assert unwrap_state_dict({"a": w, "b": w}).keys() == {"a", "b"}
    assert unwrap_state_dict({"module.a": w, "module.b": w}).keys() == {"a", "b"}
    assert unwrap_state_dict({"_orig_mod.module.a": w}).keys() == {"a"}
    assert unwrap_state_dict({"module.a": w, "b": w}).keys() == {"module.a", "b"}  # not common
    assert unwrap_state_dict({"model_state_dict": {"a": w}, "optimizer": {"state": {}}}).keys() == {"a"}
    assert unwrap_state_dict({"state_dict_ema": {"a": w}, "epoch": 1}).keys() == {"a"}
    assert unwrap_state_dict({"state_dict": {"a": w}, "state_dict_ema": {"e": w}}).keys() == {"a"}
    assert unwrap_state_dict({"model": {"state_dict": {"a": w}}}).keys() == {"a"}
    with pytest.raises(ValueError, match="No tensors"):
        unwrap_state_dict({"epoch": 3, "state_dict": {}})
    with pytest.raises(ValueError, match="state dict"):
        unwrap_state_dict([w])
