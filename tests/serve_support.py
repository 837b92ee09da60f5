"""Helpers of the `zoo serve` tests: a real uvicorn server on 127.0.0.1 in a thread (stopped
when the block ends), a free port, and Fashion-MNIST test images as PNG files."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI
from PIL import Image

from zoo.training.data.builtin import load_fashion_mnist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 120.0) -> None:
    """Until ``GET url/v2/health/ready`` answers 200 (or fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not become ready in {timeout} s")


@contextmanager
def running(app: FastAPI) -> Iterator[str]:
    """``app`` on uvicorn at 127.0.0.1 on a free port, in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="zoo-serve-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def fashion_mnist_pngs(folder: Path, count: int) -> tuple[list[Path], list[int]]:
    """The first ``count`` Fashion-MNIST test images written as PNG files, and their labels."""
    images, labels = load_fashion_mnist("test")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"fmnist_test_{i}.png"
        Image.fromarray(images[i].numpy(), mode="L").save(path)
        paths.append(path)
    return paths, labels[:count].tolist()
