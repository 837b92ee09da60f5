"""Atomic writes: a file (or a set of files) appears whole or not at all, so a reader, a crash or
a killed run never leaves half of one. The one implementation every writer in zoo uses."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import secrets
import stat
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import InvalidArgumentError, WeightsError, ZooError


@contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``target`` to write to; on a clean exit it is flushed to disk
    and renamed over ``target``, on an exception it is removed. Permissions follow the umask,
    whatever the writer set."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(target)
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


def _remove_stale_parts(target: Path) -> None:
    """Remove the temporary files a killed writer of ``target`` left (kill -9 skips every
    cleanup): those whose writer's pid no longer runs here and that have not changed for a minute."""
    for part in target.parent.glob(f".{glob.escape(target.name)}.*.part"):
        pid = part.name[len(target.name) + 2 :].split(".", 1)[0]
        with contextlib.suppress(OSError, ValueError):
            old = time.time() - part.stat().st_mtime > 60
            if old and 0 < int(pid) != os.getpid() and not _running(int(pid)):
                part.unlink()


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


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


def check_output(
    out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), folders: Iterable[str | os.PathLike] = ()
) -> Path:
    """``out`` when a command may write it (`check_writable`) without destroying what it reads:
    refused when it is one of ``inputs`` (the same file by any path: a link, ``..``, a hard
    link; the data, a listed image) or a file already inside one of ``folders`` (the data's
    folder, a run folder the model comes from; by its resolved path, or a hard link to one of
    their files). Checked before anything is written."""
    path = check_writable(out)
    if not path.exists():
        return path
    for given in inputs:
        if given is not None and Path(given).exists() and os.path.samefile(given, path):
            raise InvalidArgumentError(
                f"--out {path} is an input of this command ({given}): writing would destroy it; name another --out file"
            )
    for folder in folders:
        if Path(folder).is_dir() and (
            path.resolve().is_relative_to(Path(folder).resolve()) or _hard_linked_inside(path, Path(folder))
        ):
            raise InvalidArgumentError(
                f"--out {path} is an input of this command (a file of {folder}): writing would destroy it; "
                "name a file outside that folder"
            )
    return path


def _hard_linked_inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is a hard link to a file inside ``folder``: looked for only when the file
    has other links (rare), so a data folder of many files is walked only then."""
    info = path.stat()
    if info.st_nlink < 2 or not path.is_file():
        return False
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                found = os.stat(os.path.join(root, name), follow_symlinks=False)
                if (found.st_ino, found.st_dev) == (info.st_ino, info.st_dev):
                    return True
    return False


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


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of the file at ``path``, as hex, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_problem(folder: str | os.PathLike) -> str | None:
    """Why a folder cannot be made and written at ``folder`` (None: it can): the nearest path
    on it that exists is a file, or a folder that takes no new files. Checked before long work
    (a run, a study), so that an output folder fails first, in words, not as an OSError."""
    base = Path(folder).absolute()
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return f"{base} is a file, not a folder"
    why = None if os.access(base, os.W_OK | os.X_OK) else "permission denied"
    if why is None:
        try:  # a probe file: permission bits do not tell (root writes anywhere, /proc takes no new files)
            with tempfile.TemporaryFile(dir=base):
                pass
        except OSError as error:
            why = f"a new file there fails: {error.strerror or type(error).__name__}"
    return None if why is None else f"{base} is not writable ({why})"


def check_folder(folder: str | os.PathLike, flag: str = "--out") -> Path:
    """``folder`` when a command may make and write it (`folder_problem`), else one
    `InvalidArgumentError` naming it, its ``flag`` and what is wrong."""
    if problem := folder_problem(folder):
        raise InvalidArgumentError(f"{flag} {folder}: {problem}; choose another {flag} (a folder you can write)")
    return Path(folder)


def read_json(path: Path, max_bytes: int, *, name: str | None = None, fix: str = "") -> Any:
    """A JSON file a user handed zoo (a config, an index, a record), parsed; one over
    ``max_bytes``, unreadable or not JSON is a `WeightsError` naming it (as ``name``, when the
    path is a cache's) and saying ``fix``. Its content is the caller's to check."""
    shown, advice = name or str(path), f"; {fix}" if fix else ""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read, a device never end
            raise WeightsError(f"{shown} is not a file (a folder, a FIFO or a device){advice}")
        size = info.st_size
        if size > max_bytes:
            raise WeightsError(f"{shown} is {size:,} bytes, over the {max_bytes:,} such a file has{advice}")
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise WeightsError(f"{shown} is not readable JSON ({error}){advice}") from None


MAX_INFLATION = 100  # a zip member may inflate to this many times its compressed bytes...
INFLATION_FREE_BYTES = 64 * 2**20  # ...once it inflates to more than this


def check_zip_inflation(path: Path, error: type[ZooError], fix: str) -> None:
    """Refuse the zip archive ``path`` (an .npz, a torch file) when a member would inflate far
    beyond its compressed bytes (a zip bomb: a small file that decompresses into gigabytes), read
    from its zip directory before any member is: an ``error`` naming the file and member, saying
    ``fix``. Not a zip (or not a readable one): nothing to check, the file's reader says what it is."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    for member in members:
        if member.file_size > max(INFLATION_FREE_BYTES, MAX_INFLATION * member.compress_size):
            raise error(
                f"{path}: member {member.filename[:60]!r} declares {member.file_size:,} bytes from "
                f"{member.compress_size:,} compressed, over {MAX_INFLATION}x (a zip bomb?); {fix}"
            )


LOCK_FILE = ".zoo-run.lock"  # in an output folder while a run writes it


class FolderLock:
    """An output folder held by this process while a run writes it (`lock_folder`); `release`
    (or the end of a ``with`` block) frees it. The operating system frees it too when the
    process ends however it ends (kill -9 included), so a lock left by a dead run is taken over."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    def release(self) -> None:
        """Free the folder (the lock file goes first, so no later run locks a stale copy)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_folder(folder: str | os.PathLike, flag: str = "--out") -> FolderLock:
    """Hold ``folder`` (made if missing) for this run: a second run that asks for it while this
    one holds it gets an `InvalidArgumentError` naming the folder, its ``flag`` and the holder's
    pid. ``flock`` on `LOCK_FILE`: freed by the system when the holder dies, never stale."""
    import fcntl  # POSIX only: imported where a folder is locked

    folder = check_folder(folder, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # made a file meanwhile, a full disk: what check_folder could not see
        raise InvalidArgumentError(
            f"{flag} {folder}: cannot make it ({error.strerror}); choose another {flag}"
        ) from None
    path = folder / LOCK_FILE
    for _ in range(100):  # the holder may remove the file between our open and our lock: open it again
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise InvalidArgumentError(
                f"{flag} {folder}: cannot create its lock file {path} ({error.strerror}); choose another {flag}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise InvalidArgumentError(
                f"{flag} {folder} is in use: another run (pid {holder}) is writing it; wait for that run to end, "
                f"or choose another {flag}"
            ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                return FolderLock(path, fd)
        os.close(fd)
    raise InvalidArgumentError(f"{flag} {folder}: its lock file {path} keeps changing; choose another {flag}")
