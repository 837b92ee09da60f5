"""Shared fixtures: every test gets its own empty ZOO_HOME (so no test touches the user's
cache or inherits ZOO_OFFLINE), `http_server` serves test bytes from 127.0.0.1, and `pngs` is
a small image folder (two classes of four 28x28 gray images)."""

from __future__ import annotations

import http.server
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import torch
from PIL import Image
from threadpoolctl import threadpool_limits

MODES = ("ok", "truncate", "truncate_once", "error500_once")


@dataclass
class _Route:
    data: bytes
    mode: str  # one of MODES, or "redirect"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hits: int = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers GETs from the routes of the LocalHTTPServer that owns the listening server."""

    server: _Server

    def do_GET(self) -> None:
        owner = self.server.owner
        path = urlsplit(self.path).path
        with owner.lock:
            owner.requests.append(path)
            route = owner.routes.get(path)
            if route is not None:
                route.hits += 1
                hits = route.hits
        if route is None:
            self.send_error(404, "Not Found")
            return
        if route.mode == "redirect":
            self.send_response(302)
            self._send_headers(route.headers, length=0)
            return
        if route.mode == "error500_once" and hits == 1:
            self.send_error(500, "Internal Server Error")
            return
        self.send_response(200)
        self._send_headers(route.headers, length=len(route.data))
        time.sleep(route.delay)
        if route.mode == "truncate" or (route.mode == "truncate_once" and hits == 1):
            self.wfile.write(route.data[: len(route.data) // 2])
            self.close_connection = True  # the client sees EOF before Content-Length bytes
        else:
            self.wfile.write(route.data)

    def _send_headers(self, headers: dict[str, str], length: int) -> None:
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: LocalHTTPServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up early (truncation tests) are expected here


class LocalHTTPServer:
    """An HTTP server on 127.0.0.1 serving bytes registered with `add`; `requests` lists the
    paths asked for, in order, so tests can tell whether something was downloaded."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.routes: dict[str, _Route] = {}
        self.lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    def add(
        self,
        path: str,
        data: bytes,
        *,
        mode: str = "ok",
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> str:
        """Serve `data` at `path` and return its URL. Modes: "ok"; "truncate" (full
        Content-Length, half the bytes, then hang up); "truncate_once" and "error500_once"
        (that failure on the first request only). `delay` seconds pass before the body."""
        if mode not in MODES:
            raise ValueError(f"Unknown mode {mode!r}; use one of {MODES}.")
        return self._route(path, _Route(data, mode, dict(headers or {}), delay))

    def add_redirect(self, path: str, location: str, *, headers: dict[str, str] | None = None) -> str:
        """Answer `path` with a 302 to `location` (plus `headers`) and return its URL."""
        return self._route(path, _Route(b"", "redirect", {"Location": location, **(headers or {})}))

    def _route(self, path: str, route: _Route) -> str:
        path = "/" + path.lstrip("/")
        with self.lock:
            self.routes[path] = route
        return self.base_url + path

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


@pytest.fixture
def http_server() -> Iterator[LocalHTTPServer]:
    """A LocalHTTPServer for the duration of one test."""
    server = LocalHTTPServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _isolated_zoo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ZOO_HOME at a fresh directory (not created yet), TORCH_HOME too (zoo reuses
    torch.hub's downloads), and clear ZOO_OFFLINE."""
    home = tmp_path / "zoo_home"
    monkeypatch.setenv("ZOO_HOME", str(home))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)
    return home


@pytest.fixture
def zoo_home(_isolated_zoo_home: Path) -> Path:
    """The test's ZOO_HOME (zoo creates it on first use)."""
    return _isolated_zoo_home


def pytest_sessionstart(session: pytest.Session) -> None:
    """The run's first line names the CPU features zoo's choices see (and an override), so a
    failure report says where it ran (printed by the main process, under ``-q`` too)."""
    from zoo.devices import cpu_features

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(session.config, "workerinput"):
        return
    model = next((line.split(":", 1)[1].strip() for line in _cpu_lines() if line.startswith("model name")), "?")
    reporter.write_line(f"zoo sees: {model}, {cpu_features()}, {os.cpu_count()} cores")


def _cpu_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, split the cores between the workers: each worker's torch takes its
    share of threads instead of all of them (oversubscribed OpenMP pools wait at barriers).

    The run compiles into an inductor cache of its own (its workers and subprocesses too), not
    the user's ``/tmp/torchinductor_$USER``: a graph cached there by another run (another worker,
    or a run capped to AVX2 by ``ATEN_CPU_CAPABILITY``) once came back as a decode step that
    gave NaN logits, though compiling the same graph afresh was right."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        cache = tempfile.mkdtemp(prefix="zoo-tests-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run the test on one torch and one BLAS/OpenMP thread (small models and tiny matrix
    products: faster than spinning thread pools on a shared 2-core machine, and deterministic
    across machines)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


# Hypothesis: the "ci" profile (the default; pick another with HYPOTHESIS_PROFILE) runs a fixed,
# repeatable set of examples, without deadlines, in tests that write files under tmp_path.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def pngs(tmp_path: Path) -> Path:
    """An image folder: classes ``a`` and ``b``, four random 28x28 gray PNGs each."""
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "pngs" / label).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (28, 28), dtype=np.uint8)).save(tmp_path / "pngs" / label / f"{i}.png")
    return tmp_path / "pngs"
