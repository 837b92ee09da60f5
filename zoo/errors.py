"""zoo's errors, under one base class `ZooError`: each message names the problem, the argument
or file, and the fix. The command line turns every ZooError into one line and exit code 2."""

from __future__ import annotations

import errno
import os
import re
import sys
import warnings
from collections.abc import Callable

from zoo.architectures._errors import InvalidArgumentError, ZooError  # the families raise them too

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "ChecksumError",
    "ConfigFileError",
    "DataError",
    "DataNotFoundError",
    "DownloadError",
    "InvalidArgumentError",
    "TrainingDivergedError",
    "UnknownModelError",
    "WeightsError",
    "WeightsMismatchError",
    "WeightsNotFoundError",
    "ZooError",
    "run_command",
]


class UnknownModelError(ZooError, KeyError, ValueError):
    """An architecture or weight name that the registry does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class CheckpointError(ZooError, ValueError):
    """A training checkpoint that cannot be read or does not fit the run resuming from it."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint to resume from that is not where the user said it is."""


class TrainingDivergedError(ZooError, FloatingPointError):
    """A training run whose loss became NaN or infinite; the message says what to change."""


class DataError(ZooError, ValueError):
    """A user's data file or folder that cannot be read or used as it is."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data file, folder or data set that is not where the user (or the default) said it is."""


class WeightsMismatchError(ZooError, ValueError):
    """A state dict whose keys or shapes don't fit the model it is loaded into."""


class WeightsError(ZooError, RuntimeError):
    """Something went wrong getting or reading weights."""


class ConfigFileError(WeightsError, ValueError):
    """A configuration file that came with weights (a Hugging Face config.json or index, a saved
    folder's config) holds something zoo cannot build from; the message names the file and field."""


class ChecksumError(WeightsError):
    """A file's sha256 does not match the expected digest (or prefix)."""


class DownloadError(WeightsError):
    """A download failed: HTTP error, network error or truncated transfer."""


class WeightsNotFoundError(WeightsError, FileNotFoundError):
    """A weight file is neither in the cache nor allowed to be downloaded."""


_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp|cu):\d+\]\s*")  # [/__w/.../pair.cc:561]


def run_command(command: Callable[[], int], prog: str = "zoo") -> int:
    """Run a command-line entry point: a ZooError (or ValueError, OSError, RuntimeError) becomes
    one line on stderr and exit code 2; a reader that closed the pipe (``zoo list | head``) ends
    it quietly; Ctrl-C ends it with one line and the shell's code 130; a warning is one line,
    ``PROG: warning: ...``, without the file and source line of the code that warned. Every
    command of zoo's goes through here."""
    shown = warnings.formatwarning
    warnings.formatwarning = lambda message, *_, **__: f"{prog}: warning: {' '.join(str(message).split())}\n"
    try:
        return command()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 0
    except KeyboardInterrupt as interrupt:  # its message, when a command gives one: how to continue
        print(f"\n{prog}: interrupted{f' ({interrupt})' if interrupt.args else ''}", file=sys.stderr)
        return 130
    except (ZooError, ValueError, OSError, RuntimeError) as error:
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = shown


def _one_line(error: BaseException) -> str:
    """The error's text on one line; a name too long for a path is named by its start and length
    (the system's own message repeats it whole)."""
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG and error.filename is not None:
        name = os.fsdecode(error.filename)
        return (
            f"{name[:40]!r}... ({len(name):,} characters) is too long for a file name here (255 characters a "
            "folder or file name, 4,096 a path); check the name or path"
        )
    return without_cpp_frames(str(error))


def without_cpp_frames(text: str) -> str:
    """``text`` on one line, without what c10d, Gloo and NCCL add for their own developers: the
    C++ frames from ``Exception raised from`` on, and source locations (``[/path/pair.cc:561]``)."""
    text = text.split("Exception raised from ")[0]
    return " ".join(_SOURCE_LOCATION.sub("", text).split())
