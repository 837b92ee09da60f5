"""``zoo torchrun``: PyTorch's ``torchrun`` (torch.distributed.run) with its options as they are,
run in this process so that its failures end in one ``zoo torchrun: error: ...`` line: a lost
rendezvous (the node at ``--rdzv-endpoint`` gone), a rendezvous that timed out, a worker that
died; never C++ frames or a traceback. A worker that said why in its own zoo line (exit code 2)
is not said again."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import socket
import sys
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
    if os.environ.get("LOGLEVEL") is None:  # torchrun's own loggers: what they say, the one line says
        for name in ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # a store per round (the docs page)

    def launch() -> int:
        try:
            torchrun.run(parsed)
        except Exception as error:  # noqa: BLE001 (torch's own errors, each said in one line below)
            raise launch_error(error, parsed, again(command, parsed)) from None
        return 0

    try:
        return run_command(launch, prog=PROG)
    except _SaidByWorker as said:
        return said.code


class _SaidByWorker(Exception):
    """Every failed worker exited with 2: each said why in its own one-line zoo error."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


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


def launch_error(error: BaseException, parsed: argparse.Namespace, restart: str) -> BaseException:
    """torch's error from torchrun's agent as one `LaunchError` (or `_SaidByWorker`)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousTimeoutError

    from zoo.errors import without_cpp_frames

    endpoint = parsed.rdzv_endpoint or "the rendezvous"
    cause = without_cpp_frames(str(error.__cause__ or error))[:200]
    if isinstance(error, ChildFailedError):
        failures = list(error.failures.items())
        if all(failure.exitcode == 2 for _, failure in failures):
            return _SaidByWorker(2)
        return LaunchError(f"{_worker_failure(*failures[0], len(failures))}; its output above says why; {restart}")
    if isinstance(error, RendezvousTimeoutError):
        return LaunchError(
            f"the rendezvous at {endpoint} timed out waiting for the other nodes (a node was lost or not started; "
            f"--rdzv-conf join_timeout=SECONDS); the run's last checkpoint is kept: {restart}"
        )
    if isinstance(error, RendezvousError) or type(error).__name__.startswith("Dist"):
        return LaunchError(
            f"lost the rendezvous at {endpoint} (the node that hosts it is gone, or its torchrun stopped: {cause}); "
            f"this node's workers were stopped and the run's last checkpoint is kept: {restart}"
        )
    return LaunchError(f"torchrun stopped: {type(error).__name__}: {cause}")


def _worker_failure(rank: int, failure: Any, failed: int) -> str:
    """Which worker failed, where, and how (its exit code or signal)."""
    how = f"was killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exited with {failure.exitcode}"
    others = f" ({failed - 1} more failed)" if failed > 1 else ""
    return f"worker {rank} (pid {failure.pid} on {socket.gethostname()}) {how}{others}"
