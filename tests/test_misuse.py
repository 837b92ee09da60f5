"""API and command-line misuses found by trying zoo as a new user (issue: hardening, "also
found"): each is a `ZooError` naming the problem and the fix, and the CLI says it in one line
before any long work."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest
import safetensors.torch
import torch

import zoo
from zoo.cli import main
from zoo.errors import ZooError


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: zoo.info(None), "a model is named by a string"),
        (lambda: zoo.load("resnet20.fmnist", dtype="float16"), "dtype must be a torch.dtype"),
        (lambda: zoo.load("resnet20", weights="ftp://host/w.pth"), "not ftp://"),
        (lambda: zoo.load("resnet20.fmnist", head="lm"), "has no head 'lm'"),
        (lambda: zoo.load("resnet20.fmnist", num_classes=0), "num_classes must be a positive integer"),
    ],
)
def test_api_misuse_is_a_zoo_error(call, match: str) -> None:
    with pytest.raises(ZooError, match=match):
        call()


def test_nan_weights_are_refused(tmp_path: Path) -> None:
    state = {k: v.clone() for k, v in zoo.load("resnet20.fmnist").state_dict().items()}
    state["fc.weight"][0, 0] = float("nan")
    safetensors.torch.save_file(state, tmp_path / "nan.safetensors")
    with pytest.raises(ZooError, match=r"NaN or infinite values in fc\.weight"):
        zoo.load("resnet20.fmnist", weights=tmp_path / "nan.safetensors")


def test_zoo_home_that_is_a_file_does_not_block_bundled_weights(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "home").write_text("not a folder")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    assert zoo.load("resnet20.fmnist").num_classes == 10


def test_a_refused_pickle_is_not_kept_and_its_message_gives_no_unsafe_advice(tmp_path: Path, monkeypatch) -> None:
    class Evil:
        def __reduce__(self):
            return (os.getcwd, ())

    served = tmp_path / "served"
    served.mkdir()
    torch.save({"fc.weight": Evil()}, served / "evil.pth")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "home"))
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ZooError, match="it would import posix.getcwd") as error:
            zoo.load("resnet20", weights=f"http://127.0.0.1:{server.server_address[1]}/evil.pth")
    finally:
        server.shutdown()
    assert "weights_only=False" not in str(error.value)
    assert "add_safe_globals" not in str(error.value)
    assert not [p for p in (tmp_path / "home").rglob("*evil*") if p.suffix != ".lock"]


@pytest.mark.parametrize(
    "argv,match",
    [
        (["export", "resnet20.fmnist", "--format", "torchscript", "--out", "{tmp}/x.onnx"], "named like a onnx file"),
        (["bench", "resnet20.fmnist", "--csv", "{tmp}"], "is a folder; give the file to write"),
        (["generate", "resnet20.fmnist", "hello"], "not a byte-level language model"),
    ],
)
def test_cli_refuses_before_work(argv: list[str], match: str, tmp_path: Path, capsys) -> None:
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and match in err and out == ""
