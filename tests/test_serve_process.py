"""`zoo serve` as a user runs it: a real process on 127.0.0.1 that drains on SIGTERM (the
requests in flight and queued are answered, then exit 0), and the command line's refusals and
warnings."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_support import free_port, wait_ready

from zoo.cli.parser import main
from zoo.cli.serving import exposure_warning

TEXT = "moe_lm.stdlib"


def _stream_events(url: str, started: threading.Event) -> list[str]:
    body = {"model": TEXT, "prompt": "d", "max_tokens": 250, "temperature": 0, "stream": True}
    events = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                started.set()
    return events


def read_by_the_server(port: int, connections: int, timeout: float = 60.0) -> None:
    """Until ``connections`` connections to the server at ``port`` are accepted and hold no unread
    bytes (the kernel's counts in /proc/net/tcp: a listening socket's rx_queue is its backlog of
    connections not accepted yet): uvicorn, stopping, answers a request it has read, and drops
    one it has not (no file to read: a fixed wait)."""
    table = Path("/proc/net/tcp")
    if not table.is_file():
        time.sleep(2)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [line.split() for line in table.read_text().splitlines()[1:]]
        mine = [(row[3], int(row[4].split(":")[1], 16)) for row in rows if int(row[1].split(":")[1], 16) == port]
        established = [unread for state, unread in mine if state == "01"]  # 01: ESTABLISHED, 0A: LISTEN
        if len(established) >= connections and not any(unread for _, unread in mine):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the server at port {port} did not read {connections} requests in {timeout} s: {mine}")


def test_sigterm_answers_the_requests_in_flight_then_exits_0() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "zoo", "serve", TEXT, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        started = threading.Event()
        body = {"model": TEXT, "prompt": "import", "max_tokens": 240}
        with ThreadPoolExecutor(4) as pool:
            stream = pool.submit(_stream_events, url, started)
            assert started.wait(60)
            sent = [threading.Event() for _ in range(3)]

            def post(temperature: float, done: threading.Event) -> httpx.Response:
                def trace(name: str, info: dict) -> None:  # httpcore's: the request's body is on the wire
                    if name == "http11.send_request_body.complete":
                        done.set()

                with httpx.Client(timeout=120) as client:
                    # seeded: an unseeded sampling may draw end-of-file early (127 of 240 tokens, one
                    # run of the suite); these seeds' samplings run to max_tokens (checked on their own)
                    json_body = {**body, "temperature": temperature, "seed": {0.5: 1, 0.9: 2}.get(temperature)}
                    return client.post(f"{url}/v1/completions", json=json_body, extensions={"trace": trace})

            # three samplings: three batches, one after another, behind the stream
            queued = [pool.submit(post, t, done) for t, done in zip((0, 0.5, 0.9), sent)]
            assert all(done.wait(60) for done in sent)  # the three are sent (a loaded machine takes its time)
            read_by_the_server(port, 4)  # and read, waiting behind the stream for the model (was: 0.2 s)
            process.send_signal(signal.SIGTERM)
            events = stream.result(timeout=120)
            answers = [q.result(timeout=120) for q in queued]
        assert process.wait(timeout=60) == 0, process.stdout.read()
        log = process.stdout.read()
        assert "Waiting for connections to close" in log, log  # uvicorn drained requests still in flight
    finally:
        process.kill()
    assert events[-1] == "[DONE]" and json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    assert len("".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]).encode()) == 250
    for answer in answers:
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 240
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v2/health/live", timeout=5)


def test_zoo_serve_refuses_a_model_it_cannot_serve_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "gin3.fmnist", "--port", str(free_port())]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("zoo: error: gin3.fmnist reads graphs, which zoo serve does not take")


def test_binding_beyond_loopback_without_a_key_is_warned_about() -> None:
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("localhost", None) is None
    assert exposure_warning("::1", None) is None and exposure_warning("0.0.0.0", "key") is None
    assert "without an API key" in exposure_warning("0.0.0.0", None)
