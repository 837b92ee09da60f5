"""``zoo torchrun``'s own refusals (issue 50): nonsense options, a missing script or module, a
port in use, each one ``zoo torchrun: error:`` line naming the option, exit 2, before anything
starts (torchrun's own checks are bare assertions or a worker's traceback); Ctrl-C one line and
130, SIGTERM one line and 143, with torchrun's own log lines off."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "options,message",
    [
        (["--nnodes", "0"], "--nnodes must be at least 1 (MIN:MAX with 1 <= MIN <= MAX), got '0'"),
        (["--nnodes", "3:1"], "--nnodes must be at least 1 (MIN:MAX with 1 <= MIN <= MAX), got '3:1'"),
        (["--nnodes", "abc"], "--nnodes must be a number of nodes N or a range MIN:MAX, e.g. 2 or 1:4; got 'abc'"),
        (["--nnodes", "1:2:3"], "--nnodes must be a number of nodes N or a range MIN:MAX"),
        (["--nproc-per-node", "0"], "--nproc-per-node must be a number of processes (1 or more)"),
        (["--nproc-per-node", "-3"], "--nproc-per-node must be a number of processes (1 or more)"),
        (["--max-restarts", "-1"], "--max-restarts must be 0 or more (0: none), got -1"),
        (["--rdzv-endpoint", "host:99999"], "--rdzv-endpoint must be HOST or HOST:PORT with a port from 0 to 65535"),
        (["--rdzv-endpoint", "[::1]:x"], "--rdzv-endpoint must be HOST or HOST:PORT"),
        (["--rdzv-endpoint", "host:"], "--rdzv-endpoint must be HOST or HOST:PORT"),
    ],
)
def test_an_option_torchrun_cannot_use_is_one_line_naming_it(tmp_path, capsys, options, message) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    assert main(["torchrun", *options, str(script)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"zoo torchrun: error: {message}"), err
    assert "Assertion" not in err and "ran" not in out


def test_a_missing_script_or_module_is_one_line_before_any_worker(tmp_path, capsys) -> None:
    missing = tmp_path / "nosuch.py"
    assert main(["torchrun", "--standalone", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"zoo torchrun: error: no script '{missing}' (from {os.getcwd()}): give a Python file's path, or -m MODULE "
        "(see zoo torchrun --help)\n"
    )
    assert main(["torchrun", "--standalone", "-m", "no_such_top.module"]) == 2
    assert capsys.readouterr().err.startswith("zoo torchrun: error: -m no_such_top.module: no module 'no_such_top'")


def test_the_endpoint_port_is_read_as_written() -> None:
    from zoo.cli.torchrun_command import _endpoint_host, _endpoint_port

    cases = {"node0": None, "node0:29400": "29400", "[::1]": None, "[::1]:29400": "29400", "::1": None, "h:": ""}
    assert {endpoint: _endpoint_port(endpoint) for endpoint in cases} == cases
    hosts = {"node0": "node0", "node0:29400": "node0", "[::1]": "::1", "[::1]:29400": "::1", "::1": "::1", "h:": "h"}
    assert {endpoint: _endpoint_host(endpoint) for endpoint in hosts} == hosts


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _zoo_torchrun(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "zoo", "torchrun", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_port_in_use_is_named_with_the_way_out(tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        agent = _zoo_torchrun(["--master-addr", "127.0.0.1", "--master-port", str(port), str(script)], tmp_path)
        out, err = agent.communicate(timeout=120)
    assert agent.returncode == 2 and "ran" not in out
    assert err == (
        f"zoo torchrun: error: port {port} on this host is in use already (another torchrun, or another program, "
        "listens there): stop it, or give a free port (--rdzv-endpoint HOST:PORT, --master-port PORT, or "
        "--standalone, which finds one); no worker was started\n"
    ), err


@pytest.mark.parametrize(
    "sent,code,line",
    [(signal.SIGINT, 130, "zoo torchrun: interrupted"), (signal.SIGTERM, 143, "zoo torchrun: stopped by SIGTERM")],
)
def test_a_signal_to_the_agent_is_one_line_and_the_shells_code(tmp_path, sent, code, line) -> None:
    """Was: torchrun's 'Received 2 death signal' log line, then 'torchrun stopped: SignalException', exit 2."""
    script = tmp_path / "train.py"
    script.write_text(
        "import signal, sys, time\nsignal.signal(signal.SIGINT, lambda *_: sys.exit(1))\nprint('up', flush=True)\ntime.sleep(120)\n"
    )
    agent = _zoo_torchrun(["--standalone", "--nproc-per-node", "1", str(script)], tmp_path)
    assert agent.stdout.readline() == "up\n"
    time.sleep(0.5)
    agent.send_signal(sent)
    _, err = agent.communicate(timeout=60)
    assert agent.returncode == code
    assert err.strip().splitlines() == [line] if sent == signal.SIGINT else err.startswith(line), err


def test_workers_that_said_why_are_not_said_again_when_the_agent_stopped_the_rest() -> None:
    """One worker exited 2 (its own zoo line) and the agent stopped the other with SIGTERM: no
    second line saying 'start again with --resume' (a run that never began has nothing to resume)."""
    import signal as signals

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from zoo.cli.torchrun_command import LaunchError, _SaidByWorker, launch_error, torchrun_parser

    parsed = torchrun_parser().parse_args(["--standalone", "-m", "zoo.training.finetune", "resnet20"])

    def failed(*codes: int) -> ChildFailedError:
        return ChildFailedError(
            "m", {rank: ProcessFailure(rank, 100 + rank, code, "<N/A>") for rank, code in enumerate(codes)}
        )

    assert isinstance(launch_error(failed(2, -signals.SIGTERM), parsed, "again"), _SaidByWorker)
    assert isinstance(launch_error(failed(-signals.SIGTERM, 2), parsed, "again"), _SaidByWorker)
    assert isinstance(launch_error(failed(-signals.SIGKILL, 2), parsed, "again"), LaunchError)  # killed by someone else
    assert isinstance(launch_error(failed(-signals.SIGTERM, -signals.SIGTERM), parsed, "again"), LaunchError)


def test_a_program_that_is_no_rendezvous_store_at_the_endpoint_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    """A c10d endpoint whose port a silent program holds: torchrun's agent would wait on it for
    good; zoo says so in one line, exit 2, within the store's answer time. A real store there
    (the hosting node's agent already up) passes."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from zoo.cli import torchrun_command

    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    with socket.socket() as silent:  # accepts (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        options = ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", str(script)]
        started = time.monotonic()
        assert main(["torchrun", *options]) == 2
        assert time.monotonic() - started < torchrun_command.STORE_ANSWER_S + 40
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"zoo torchrun: error: --rdzv-endpoint 127.0.0.1:{port}: a program")
    assert "did not answer as a store within 20 s" in err and "no worker was started" in err
    monkeypatch.setattr(torchrun_command, "STORE_ANSWER_S", 60.0)
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30), wait_for_workers=False)
    parsed = torchrun_command.torchrun_parser().parse_args(options[:-2] + [f"127.0.0.1:{store.port}", str(script)])
    assert torchrun_command.foreign_service(parsed) is None
