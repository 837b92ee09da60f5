"""Atomic writes: a file (or a set of files) appears whole or not at all, so a reader, a crash or
a killed run never leaves half of one. The one implementation every writer in zoo uses."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import InvalidArgumentError, WeightsError


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``target`` to write to; on a clean exit it is flushed to disk
    and renamed over ``target``, on an exception it is removed. Permissions follow the umask,
    whatever the writer set."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    mode = _new_file_mode(tmp)
    try:
        yield tmp
        os.chmod(tmp, mode)  # a writer that recreates the file may narrow it (safetensors writes 0600)
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(data: Any, path: str | os.PathLike) -> Path:
    """Write ``data`` as indented JSON, atomically."""
    return write_bytes_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


@contextmanager
def atomic_files(directory: str | os.PathLike, last: Sequence[str] = ()) -> Iterator[Path]:
    """A staging folder inside ``directory``: the files written into it move into ``directory``
    on a clean exit, those named in ``last`` last and in that order (a file that marks the set
    complete, such as a config, goes last), and vanish on an exception. Permissions follow the
    umask, whatever the writers set."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".staging-") as staging:
        probe = Path(staging, ".mode")
        mode = _new_file_mode(probe)
        probe.unlink()
        yield Path(staging)
        staged = sorted(
            Path(staging).iterdir(), key=lambda p: (p.name in last, last.index(p.name) if p.name in last else 0)
        )
        for path in staged:
            os.chmod(path, mode)
            _fsync(path)
            os.replace(path, directory / path.name)
        _fsync(directory)


def _new_file_mode(path: Path) -> int:
    """Create the empty file ``path`` as a new file is created here (0666 less the umask) and
    return its permission bits, which every file zoo writes gets."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return path.stat().st_mode & 0o777


def _fsync(path: Path) -> None:
    """Flush a file's or a folder's data to disk (folders: the renames in them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a folder
        if not path.is_dir():
            raise
    finally:
        os.close(fd)


def check_writable(path: str | os.PathLike) -> Path:
    """``path`` when a file can be written there: not a folder, inside a folder that exists or
    can be made and takes new files. Checked before long work, so that it fails first."""
    path = Path(path)
    if path.is_dir():
        raise InvalidArgumentError(f"{path} is a folder; give the file to write inside it")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise InvalidArgumentError(f"cannot write {path}: {folder} is a file, not a folder; choose another path")
    try:  # a probe file: permission bits do not tell (root writes anywhere, /proc takes no new files)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise InvalidArgumentError(
            f"cannot write {path}: {folder} does not take new files ({error.strerror}); choose another folder"
        ) from None
    return path


def read_json(path: Path, max_bytes: int, *, name: str | None = None, fix: str = "") -> Any:
    """A JSON file a user handed zoo (a config, an index, a record), parsed; one over
    ``max_bytes``, unreadable or not JSON is a `WeightsError` naming it (as ``name``, when the
    path is a cache's) and saying ``fix``. Its content is the caller's to check."""
    shown, advice = name or str(path), f"; {fix}" if fix else ""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise WeightsError(f"{shown} is {size:,} bytes, over the {max_bytes:,} such a file has{advice}")
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise WeightsError(f"{shown} is not readable JSON ({error}){advice}") from None
