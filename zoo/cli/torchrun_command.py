"""``zoo torchrun``: PyTorch's ``torchrun`` (torch.distributed.run) with its options as they are,
run in this process so that its failures end in one ``zoo torchrun: error: ...`` line: a lost
rendezvous (the node at ``--rdzv-endpoint`` gone), a rendezvous that timed out, a worker that
died; never C++ frames or a traceback. A worker that said why in its own zoo line (exit code 2)
is not said again."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from zoo.errors import ZooError, run_command

PROG = "zoo torchrun"
_RESUMING_MODULES = ("zoo.training.finetune", "zoo.training.transfer")  # they take --resume


class LaunchError(ZooError, RuntimeError):
    """torchrun's agent on this node stopped: its rendezvous was lost or timed out, or a worker died."""


def arguments(parser: argparse.ArgumentParser) -> None:
    """Every argument is torchrun's, passed on as it is (``zoo torchrun --help`` is torchrun's help)."""
    parser.prefix_chars = "\0"  # no option of its own: -h and --nnodes are torchrun's
    parser.add_argument(
        "torchrun_args", nargs=argparse.REMAINDER, help="torchrun's options, then the script or -m module"
    )


def run_torchrun(args: argparse.Namespace) -> int:
    """Run torchrun's agent on ``args.torchrun_args``; its failures become one line and exit code 2."""
    argv = list(args.torchrun_args)
    command = getattr(args, "command_line", shlex.join(["zoo", "torchrun", *argv]))
    _quiet_cpp_warnings()
    from torch.distributed import run as torchrun

    parsed = torchrun_parser().parse_args(argv)
    problem = options_problem(parsed) or foreign_service(parsed)
    if problem:
        print(f"{PROG}: error: {problem} (see {PROG} --help)", file=sys.stderr)
        return 2
    if os.environ.get("LOGLEVEL") is None:  # torchrun's own loggers: what they say, the one line says
        _quiet_torchrun_loggers()
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # a store per round (the docs page)

    def launch() -> int:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        try:
            torchrun.run(parsed)
        except SignalException as error:  # Ctrl-C (SIGINT) is one line and 130; SIGTERM/SIGHUP one line and 128+N
            if error.sigval == signal.SIGINT:
                raise KeyboardInterrupt from None
            raise _Signalled(error.sigval) from None
        except Exception as error:  # noqa: BLE001 (torch's own errors, each said in one line below)
            raise launch_error(error, parsed, again(command, parsed)) from None
        return 0

    try:
        return run_command(launch, prog=PROG)
    except _SaidByWorker as said:
        return said.code
    except _Signalled as stopped:
        print(
            f"{PROG}: stopped by {stopped.name}; this node's workers were stopped: {again(command, parsed)}",
            file=sys.stderr,
        )
        return 128 + stopped.number


class _SaidByWorker(Exception):
    """Every failed worker exited with 2: each said why in its own one-line zoo error."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Signalled(Exception):
    """The agent was sent SIGTERM or SIGHUP (not Ctrl-C): it stopped its workers."""

    def __init__(self, sigval: signal.Signals) -> None:
        super().__init__(sigval)
        self.number = int(sigval)
        self.name = signal.Signals(sigval).name


_TORCHRUN_LOGGERS = ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")


def _quiet_torchrun_loggers() -> None:
    """torchrun's loggers off (each of torch's elastic modules sets its own level as it is
    imported, so the parents' level is not enough): the agent's failures are said in one line."""
    import torch.distributed.elastic.rendezvous.dynamic_rendezvous  # noqa: F401 (their loggers made now)
    import torch.distributed.elastic.rendezvous.static_tcp_rendezvous  # noqa: F401
    from torch.distributed import run  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_TORCHRUN_LOGGERS):
            logging.getLogger(name).setLevel(logging.CRITICAL)


_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


def options_problem(parsed: argparse.Namespace) -> str | None:
    """What is wrong with torchrun's options, said by the option, before anything starts
    (torchrun's own checks are bare assertions, or a worker's traceback for a missing script)."""
    nodes = parsed.nnodes.split(":")
    if len(nodes) > 2 or not all(part.strip().isdigit() for part in nodes):
        return f"--nnodes must be a number of nodes N or a range MIN:MAX, e.g. 2 or 1:4; got {parsed.nnodes!r}"
    low, high = int(nodes[0]), int(nodes[-1])
    if not 1 <= low <= high:
        return f"--nnodes must be at least 1 (MIN:MAX with 1 <= MIN <= MAX), got {parsed.nnodes!r}"
    nproc = str(parsed.nproc_per_node)
    if not (nproc.isdigit() and int(nproc) >= 1) and nproc not in _NPROC_WORDS:
        return f"--nproc-per-node must be a number of processes (1 or more) or one of {', '.join(_NPROC_WORDS)}; got {nproc!r}"
    if parsed.max_restarts < 0:
        return f"--max-restarts must be 0 or more (0: none), got {parsed.max_restarts}"
    port = _endpoint_port(parsed.rdzv_endpoint or "")
    if port is not None and not (port.isdigit() and int(port) <= 65535):
        return f"--rdzv-endpoint must be HOST or HOST:PORT with a port from 0 to 65535, got {parsed.rdzv_endpoint!r}"
    if parsed.module:
        top = parsed.training_script.split(".")[0]
        if not top.isidentifier() or importlib.util.find_spec(top) is None:
            return f"-m {parsed.training_script}: no module {top!r} here; name an installed module, e.g. -m zoo.training.finetune"
    elif not parsed.no_python and not os.path.isfile(parsed.training_script):
        return f"no script {parsed.training_script!r} (from {os.getcwd()}): give a Python file's path, or -m MODULE"
    return None


STORE_ANSWER_S = 20.0  # a rendezvous store answers its handshake in well under this, torch's import included
C10D_PORT = 29400  # torchrun's port for a c10d --rdzv-endpoint without one
_PING_STORE = (
    "import sys; from datetime import timedelta; from torch.distributed import TCPStore; print('asking', flush=True); "
    "TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=timedelta(seconds=5), wait_for_workers=False)"
)


def foreign_service(parsed: argparse.Namespace) -> str | None:
    """What is wrong when a program that is not a rendezvous store listens at a c10d
    ``--rdzv-endpoint``: torchrun's agent would connect to it as a store and wait for an answer
    that never comes (no timeout bounds that read), so a connection that is accepted gets a
    store's handshake, in a process of its own, bounded by `STORE_ANSWER_S` (one that has not
    imported torch by then gives no verdict: a slow machine is not refused). Nothing listening is
    torchrun's to wait for (the hosting node may start later)."""
    if parsed.standalone or parsed.rdzv_backend != "c10d" or not parsed.rdzv_endpoint:
        return None
    endpoint = parsed.rdzv_endpoint
    host, port = _endpoint_host(endpoint), int(_endpoint_port(endpoint) or C10D_PORT)
    try:
        socket.create_connection((host, port), timeout=2.0).close()
    except OSError:
        return None
    env = {**os.environ, "TORCH_CPP_LOG_LEVEL": "FATAL"}
    command = [sys.executable, "-c", _PING_STORE, host, str(port)]
    try:
        answered = subprocess.run(command, capture_output=True, timeout=STORE_ANSWER_S, env=env).returncode == 0
    except subprocess.TimeoutExpired as waited:
        answered = b"asking" not in (waited.stdout or b"")  # still importing torch: no verdict, torchrun's to try
    if answered:
        return None
    return (
        f"--rdzv-endpoint {endpoint}: a program that is not torchrun's rendezvous listens at port {port} (it did not "
        f"answer as a store within {STORE_ANSWER_S:g} s): stop it, or give a free port (--rdzv-endpoint HOST:PORT, or "
        "--standalone, which finds one); no worker was started"
    )


def _endpoint_host(endpoint: str) -> str:
    """The host of HOST, HOST:PORT, [IPv6] or [IPv6]:PORT, or a bare IPv6 address, as `_endpoint_port` reads them."""
    if endpoint.startswith("["):
        return endpoint[1:].partition("]")[0]
    return endpoint.partition(":")[0] if endpoint.count(":") == 1 else endpoint


def _endpoint_port(endpoint: str) -> str | None:
    """The port of HOST:PORT or [IPv6]:PORT as written ("" when the colon has none), None when there
    is none to read (HOST, [IPv6], or a bare IPv6 address: torch's to read)."""
    if endpoint.startswith("["):
        after = endpoint.partition("]")[2]
        return after[1:] if after.startswith(":") else after or None
    return endpoint.partition(":")[2] if endpoint.count(":") == 1 else None


def torchrun_parser() -> argparse.ArgumentParser:
    """torchrun's own parser, named ``zoo torchrun``, its errors in one line."""
    from torch.distributed import run as torchrun

    parser = torchrun.get_args_parser()
    parser.prog = PROG
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")  # type: ignore[method-assign]
    return parser


def _quiet_cpp_warnings() -> None:
    """c10d's C++ warnings (a store connection lost, with its C++ frames) off in this process:
    read once, as torch is imported; the workers keep the level the user set."""
    if "torch" in sys.modules or "TORCH_CPP_LOG_LEVEL" in os.environ:
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    import torch  # noqa: F401 (reads TORCH_CPP_LOG_LEVEL once)

    del os.environ["TORCH_CPP_LOG_LEVEL"]


def again(command: str, parsed: argparse.Namespace) -> str:
    """What to run on every node to go on from the run's last checkpoint."""
    script = [parsed.training_script, *parsed.training_script_args]
    resumes = parsed.module and parsed.training_script in _RESUMING_MODULES and "--resume" not in script
    if resumes and parsed.max_restarts == 0:
        command += " --resume"
    return f"start `{command}` again on every node (the --rdzv-endpoint node first)"


def _kept(parsed: argparse.Namespace) -> str:
    """The run's last checkpoint, named by its path where the worker's --out says it."""
    args = list(parsed.training_script_args)
    out = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--out"), None)
    out = out or next((arg.split("=", 1)[1] for arg in args if arg.startswith("--out=")), None)
    where = f" {Path(out) / 'checkpoints' / 'last.pt'}" if out else ""
    return f"the run's last checkpoint{where} is kept"


def launch_error(error: BaseException, parsed: argparse.Namespace, restart: str) -> BaseException:
    """torch's error from torchrun's agent as one `LaunchError` (or `_SaidByWorker`)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousTimeoutError

    from zoo.errors import without_cpp_frames

    endpoint = parsed.rdzv_endpoint or f"{parsed.master_addr or '127.0.0.1'}:{parsed.master_port}"
    cause = without_cpp_frames(str(error.__cause__ or error))[:200]
    if "EADDRINUSE" in cause or "address already in use" in cause.lower():
        port = re.search(r"port:? (\d+)", cause)
        return LaunchError(
            f"port {port.group(1) if port else parsed.master_port} on this host is in use already (another torchrun, or "
            "another program, listens there): stop it, or give a free port (--rdzv-endpoint HOST:PORT, --master-port "
            "PORT, or --standalone, which finds one); no worker was started"
        )
    if isinstance(error, ChildFailedError):
        failures = list(error.failures.items())
        said = [failure.exitcode == 2 for _, failure in failures]
        stopped = [failure.exitcode == -signal.SIGTERM for _, failure in failures]  # by the agent, after one failed
        if any(said) and all(a or b for a, b in zip(said, stopped)):
            return _SaidByWorker(2)
        return LaunchError(f"{_worker_failure(*failures[0], len(failures))}; its output above says why; {restart}")
    if isinstance(error, RendezvousTimeoutError):
        return LaunchError(
            f"the rendezvous at {endpoint} timed out waiting for the other nodes (a node was lost or not started; "
            f"--rdzv-conf join_timeout=SECONDS); {_kept(parsed)}: {restart}"
        )
    if isinstance(error, RendezvousError) or type(error).__name__.startswith("Dist"):
        return LaunchError(
            f"lost the rendezvous at {endpoint} (the node that hosts it is gone, or its torchrun stopped: {cause}); "
            f"this node's workers were stopped and {_kept(parsed)}: {restart}"
        )
    return LaunchError(f"torchrun stopped: {type(error).__name__}: {cause}")


def _worker_failure(rank: int, failure: Any, failed: int) -> str:
    """Which worker failed, where, and how (its exit code or signal)."""
    how = f"was killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exited with {failure.exitcode}"
    others = f" ({failed - 1} more failed)" if failed > 1 else ""
    return f"worker {rank} (pid {failure.pid} on {socket.gethostname()}) {how}{others}"
