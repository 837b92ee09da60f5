"""The Hugging Face Hub as a weight source (zoo.interop.hf_hub): repositories laid out in a Hub cache on
disk and read offline, and a Hub-compatible server on 127.0.0.1 as HF_ENDPOINT for downloads."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import safetensors.torch
import timm
import torch
from hypothesis import given
from hypothesis import strategies as st
from timm.models._hub import save_for_hf

import zoo
from tests.published import randomize_batchnorm
from zoo.errors import ChecksumError, InvalidArgumentError, WeightsNotFoundError
from zoo.interop import hf_hub, hub_names
from zoo.store import weight_entries

COMMIT = "a" * 40
NEW_COMMIT = "b" * 40


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name: str) -> bool:
    return name.endswith((".safetensors", ".bin"))


def lay_out_snapshot(cache: Path, repo_id: str, commit: str, folder: Path) -> Path:
    """Put ``folder``'s files into a Hub cache as huggingface_hub does: blobs named by their
    LFS sha256 (or git blob id), snapshot links to them, and refs/main naming the commit."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        data = path.read_bytes()
        blob = repo / "blobs" / (hashlib.sha256(data).hexdigest() if is_lfs(path.name) else git_blob_id(data))
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        (snapshot / path.name).symlink_to(Path("../../blobs") / blob.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache for the test, online unless the test says otherwise."""
    cache = tmp_path / "hf_cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return cache


@pytest.fixture
def timm_folder(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    """A timm resnet18 with 7 classes and random BatchNorm statistics, saved as timm pushes to the Hub."""
    torch.manual_seed(0)
    model = randomize_batchnorm(timm.create_model("resnet18", num_classes=7)).eval()
    folder = tmp_path / "timm_repo"
    save_for_hf(
        model, str(folder), model_config={"label_names": [f"class{i}" for i in range(7)]}, safe_serialization=True
    )
    return model, folder


def test_timm_repository_loads_offline_and_matches_timm(hf_cache, timm_folder, monkeypatch):
    reference, folder = timm_folder
    lay_out_snapshot(hf_cache, "acme/tiny-resnet", COMMIT, folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = zoo.load("hf-hub:acme/tiny-resnet")
    x = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    cfg = model.pretrained_cfg
    assert cfg["weights"] == f"hf-hub:acme/tiny-resnet@{COMMIT}" and cfg["class_names"][6] == "class6"
    assert cfg["preprocess"] == {
        "resize": 235,
        "crop": 224,
        "interpolation": "bicubic",
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
    }
    assert zoo.load(f"hf-hub:acme/tiny-resnet@{COMMIT}", num_classes=3).num_classes == 3
    backbone = zoo.load("hf-hub:acme/tiny-resnet", features_only=True, out_indices=(4,))
    with torch.no_grad():
        torch.testing.assert_close(backbone(x)[-1], reference.forward_features(x), rtol=1e-5, atol=1e-5)


def test_zoo_save_folder_round_trips_through_the_hub_cache(hf_cache, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = randomize_batchnorm(zoo.load("resnet18", pretrained=False, in_chans=1, num_classes=5))
    zoo.save(model, tmp_path / "saved")
    card = (tmp_path / "saved" / "README.md").read_text()
    assert card.startswith('---\nlibrary_name: "zoo"\n') and 'pipeline_tag: "image-classification"' in card
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["model_args"] == {"in_chans": 1} and config["pretrained_cfg"]["num_classes"] == 5
    lay_out_snapshot(hf_cache, "acme/saved", COMMIT, tmp_path / "saved")
    monkeypatch.setenv("ZOO_OFFLINE", "1")  # zoo's own switch turns the Hub off too
    loaded = zoo.load("hf-hub:acme/saved")
    x = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model.eval()(x), rtol=0, atol=0)
    assert loaded.pretrained_cfg == {**model.pretrained_cfg, "num_classes": 5}
    timm_model = timm.create_model(config["architecture"], **config["model_args"], num_classes=config["num_classes"])
    timm_model.load_state_dict(safetensors.torch.load_file(tmp_path / "saved" / "model.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(timm_model.eval()(x), loaded(x), rtol=1e-5, atol=1e-5)


def test_offline_without_the_files_names_the_repo_and_how_to_fetch_it(hf_cache, monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(
        WeightsNotFoundError,
        match=r"config.json of acme/missing@v2 is not in the Hugging Face cache.*hf download acme/missing config.json --revision v2",
    ):
        zoo.load("hf-hub:acme/missing@v2")


def test_architecture_zoo_lacks_is_refused_with_what_zoo_has(hf_cache, tmp_path, monkeypatch):
    (tmp_path / "repo").mkdir()
    config = {
        "architecture": "mobilenetv3_large_100",
        "num_classes": 1000,
        "pretrained_cfg": {"input_size": [3, 224, 224]},
    }
    (tmp_path / "repo" / "config.json").write_text(json.dumps(config))
    lay_out_snapshot(hf_cache, "acme/mnv3", COMMIT, tmp_path / "repo")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InvalidArgumentError, match=r"timm 'mobilenetv3_large_100' model.*resnet18, resnet34"):
        zoo.load("hf-hub:acme/mnv3")


@given(
    org=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True),
    repo=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,12}", fullmatch=True),
    revision=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)),
)
def test_hub_names_parse_into_repo_and_revision(org, repo, revision):
    name = f"hf-hub:{org}/{repo}" + (f"@{revision}" if revision else "")
    assert hub_names.parse_hub_name(name) == hub_names.HubRepo(f"{org}/{repo}", revision or "main")


@pytest.mark.parametrize("name", ["hf-hub:justarepo", "hf-hub:a/b/c", "hf-hub:a/b@", "hf-hub:/b"])
def test_malformed_hub_names_say_the_form(name):
    with pytest.raises(InvalidArgumentError, match="write ORG/REPO or ORG/REPO@REVISION"):
        zoo.load(name)


# ------------------------------------------------------------------ a Hub on 127.0.0.1


@dataclasses.dataclass
class HubFile:
    declared: bytes  # what the Hub's metadata (ETag, tree listing) describes
    served: bytes  # what a download returns: differs to simulate a corrupt transfer or mirror


class _HubHandler(http.server.BaseHTTPRequestHandler):
    server: _HubServer

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path)
        hub.requests.append(f"{self.command} {path}")
        if path.startswith("/api/models/"):
            org, name, kind, revision = path.removeprefix("/api/models/").split("/", 4)[:4]
            commit = hub.refs.get((f"{org}/{name}", revision), revision)
            files = hub.repos.get(f"{org}/{name}", {}).get(commit)
            if files is None:
                return self._send(404, b"", {"X-Error-Code": "RepoNotFound"})
            if kind == "revision":
                info = {"id": f"{org}/{name}", "sha": commit, "siblings": [{"rfilename": f} for f in files]}
            else:
                info = [
                    {"type": "file", "path": f, "size": len(d.declared), "oid": git_blob_id(d.declared)}
                    | (
                        {
                            "lfs": {
                                "oid": hashlib.sha256(d.declared).hexdigest(),
                                "size": len(d.declared),
                                "pointerSize": 134,
                            }
                        }
                        if is_lfs(f)
                        else {}
                    )
                    for f, d in files.items()
                ]
            return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        org, name, _, revision, filename = path.lstrip("/").split("/", 4)
        repo = f"{org}/{name}"
        if repo not in hub.repos:
            return self._send(404, b"", {"X-Error-Code": "RepoNotFound"})
        commit = hub.refs.get((repo, revision), revision)
        if commit not in hub.repos[repo]:
            return self._send(404, b"", {"X-Error-Code": "RevisionNotFound"})
        file = hub.repos[repo][commit].get(filename)
        if file is None:
            return self._send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(file.declared)}"'}
        if is_lfs(filename):
            sha256 = hashlib.sha256(file.declared).hexdigest()
            headers |= {"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(file.declared)), "ETag": f'"{sha256}"'}
        self._send(200, file.served, headers, body)

    def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool = True) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if body and self.command == "GET":
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HubServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    hub: FakeHub


class FakeHub:
    """The endpoints huggingface_hub calls to download: HEAD/GET /{repo}/resolve/{rev}/{file}
    (X-Repo-Commit, ETag, X-Linked-Etag/Size for LFS files) and /api/models/{repo}/revision|tree."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, dict[str, HubFile]]] = {}
        self.refs: dict[tuple[str, str], str] = {}
        self.requests: list[str] = []
        self._httpd = _HubServer(("127.0.0.1", 0), _HubHandler)
        self._httpd.hub = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    def publish(self, repo_id: str, folder: Path, commit: str = COMMIT, served: dict[str, bytes] | None = None) -> None:
        """Serve ``folder``'s files as ``repo_id`` at ``commit``, which becomes its main branch."""
        files = {
            p.name: HubFile(p.read_bytes(), (served or {}).get(p.name, p.read_bytes()))
            for p in folder.iterdir()
            if p.is_file()
        }
        self.repos.setdefault(repo_id, {})[commit] = files
        self.refs[(repo_id, "main")] = commit

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


@pytest.fixture
def fake_hub(hf_cache, monkeypatch) -> Iterator[FakeHub]:
    server = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    try:
        yield server
    finally:
        server.close()


def test_download_checks_the_lfs_sha256_and_refuses_a_wrong_file(fake_hub, timm_folder, hf_cache):
    reference, folder = timm_folder
    fake_hub.publish("acme/good", folder)
    model = zoo.load("hf-hub:acme/good")
    assert model.pretrained_cfg["weights"] == f"hf-hub:acme/good@{COMMIT}"
    assert (hf_cache / "models--acme--good" / "refs" / "main").read_text() == COMMIT
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    weights = (folder / "model.safetensors").read_bytes()
    tampered = weights[:-1] + bytes([weights[-1] ^ 1])
    fake_hub.publish("acme/bad", folder, served={"model.safetensors": tampered})
    with pytest.raises(ChecksumError, match=r"model.safetensors of acme/bad .*failed verification.*removed it"):
        zoo.load("hf-hub:acme/bad")
    assert not list((hf_cache / "models--acme--bad" / "blobs").glob(hashlib.sha256(weights).hexdigest()))


def test_hub_errors_name_the_repo_revision_and_fix(fake_hub, timm_folder):
    fake_hub.publish("acme/good", timm_folder[1])
    with pytest.raises(WeightsNotFoundError, match=r"no Hugging Face Hub repository acme/nothing .*check the name"):
        zoo.load("hf-hub:acme/nothing")
    with pytest.raises(WeightsNotFoundError, match=r"acme/good has no revision 'v9'"):
        zoo.load("hf-hub:acme/good@v9")


def test_moe_lm_weights_from_a_hub_repository_online_then_offline(fake_hub, tmp_path, monkeypatch):
    torch.manual_seed(0)
    options = dict(
        vocab_size=64,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        num_experts=4,
        top_k=2,
        intermediate_size=48,
        max_position_embeddings=64,
    )
    original = zoo.load("moe_lm", pretrained=False, **options)
    zoo.export_hf(original, tmp_path / "mixtral")
    fake_hub.publish("acme/tiny-mixtral", tmp_path / "mixtral")
    ids = torch.randint(0, 64, (2, 9))
    model = zoo.load("moe_lm", weights="acme/tiny-mixtral")
    with torch.no_grad():
        torch.testing.assert_close(model(ids), original(ids), rtol=1e-5, atol=1e-5)
    assert model.pretrained_cfg["weights"] == f"acme/tiny-mixtral@{COMMIT}"
    fake_hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = zoo.load("moe_lm", weights=f"acme/tiny-mixtral@{COMMIT}")
    assert fake_hub.requests == []
    with torch.no_grad():
        torch.testing.assert_close(again(ids), model(ids), rtol=0, atol=0)


def test_entry_records_its_first_download_and_refuses_another_file(
    fake_hub, timm_folder, hf_cache, monkeypatch, zoo_home
):
    _, folder = timm_folder
    fake_hub.publish("acme/pinned", folder)
    entry = weight_entries.WeightInfo(
        name="resnet18.hub_test",
        hf_hub="acme/pinned",
        revision="main",
        num_classes=7,
        sha256_policy=hf_hub.RECORDED_AT_FIRST_DOWNLOAD,
    )
    monkeypatch.setitem(weight_entries._weights, entry.name, entry)
    first = zoo.load("resnet18.hub_test")
    record = json.loads((zoo_home / "hf-pins" / "resnet18.hub_test.json").read_text())
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert record["commit"] == COMMIT and record["sha256"] == digest
    torch.manual_seed(1)  # a new upload on main must not change what the entry loads
    save_for_hf(timm.create_model("resnet18", num_classes=7), str(folder.parent / "retrained"), safe_serialization=True)
    fake_hub.publish("acme/pinned", folder.parent / "retrained", commit=NEW_COMMIT)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(zoo.load("resnet18.hub_test")(x), first(x), rtol=0, atol=0)
    blob = hf_cache / "models--acme--pinned" / "blobs" / digest
    blob.write_bytes(blob.read_bytes()[:-1] + b"\0")
    with pytest.raises(ChecksumError, match=f"expected sha256 {digest}"):
        zoo.load("resnet18.hub_test")
