"""The verified weight store: downloads over http(s) into ``$ZOO_HOME``, checks every file
against a sha256 (full digest or a publisher's prefix), and converts pickled checkpoints to
safetensors once, so that later loads never unpickle anything.

Layout of ``$ZOO_HOME`` (default ``~/.cache/zoo``)::

    downloads/   files exactly as published (only verified files ever appear here)
    converted/   safetensors made from pickled checkpoints by fetch_state_dict()
    records/     {size, mtime_ns, sha256} per file, so re-verification does not re-read it
    locks/       inter-process locks around download and conversion

One download attempt is `zoo.store.http_download`'s; reading a state dict from a file (safetensors or
a pickle, unwrapped) is `zoo.store.state_dict_files`'.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import torch
from filelock import FileLock
from safetensors.torch import save_file

from zoo.errors import ChecksumError, DownloadError, InvalidArgumentError, WeightsError, WeightsNotFoundError
from zoo.store.files import atomic_path, read_json, sha256_file, write_bytes_atomic
from zoo.store.http_download import SHA256_HEX, TransientError, describe_expected, download_once
from zoo.store.state_dict_files import load_state_dict_file, open_safetensors, standalone_tensors

__all__ = [
    "ChecksumError",
    "DownloadError",
    "WeightsError",
    "WeightsNotFoundError",
    "fetch",
    "fetch_state_dict",
    "hash_prefix_from_filename",
    "is_hf_offline",
    "is_offline",
    "verify_file",
    "zoo_home",
]

_BACKOFF_S = 0.2  # sleep _BACKOFF_S * attempt between download attempts
_MIN_PREFIX = 8  # shortest hash prefix accepted as an expected hash
_HEX = re.compile(r"[0-9a-f]+")
# torch.hub convention: "<name>-<hex>.<ext>[.<ext>]", the hex being a prefix of the sha256
_HASH_IN_NAME = re.compile(rf".+-([0-9a-fA-F]{{{_MIN_PREFIX},64}})(?:\.[A-Za-z0-9_]+)+")
_SOURCE_SHA256_KEY = "zoo.source_sha256"  # safetensors metadata of converted files


def zoo_home() -> Path:
    """The cache root: ``$ZOO_HOME`` or ``~/.cache/zoo``. It may be read-only (a shared cache, a
    container image): files already there are verified and used, and only writing into it fails."""
    home = Path(os.environ.get("ZOO_HOME") or "~/.cache/zoo").expanduser()
    if home.exists() and not home.is_dir():
        raise WeightsError(f"ZOO_HOME={home} is a file, not a folder: point ZOO_HOME at a folder for zoo's cache.")
    return home


def weight_folders() -> list[Path]:
    """Where registered weights are read from: the bundled ones (the ``zoo.weights`` package)
    and zoo's cache (downloads, conversions). A command's ``--out`` file there would overwrite
    the weights it loads (`zoo.store.files.check_output` refuses it)."""
    from importlib import resources

    folders = [Path(str(resources.files("zoo.weights")))]
    with contextlib.suppress(WeightsError):  # ZOO_HOME a file: loading says so, when it needs the cache
        folders += [zoo_home() / "downloads", zoo_home() / "converted"]
    return folders


def is_offline() -> bool:
    """Whether ``ZOO_OFFLINE`` forbids network access (``1``, ``true``, ``yes`` or ``on``)."""
    return _is_true(os.environ.get("ZOO_OFFLINE"))


def is_hf_offline() -> bool:
    """Whether downloads from the Hugging Face Hub are off: ``HF_HUB_OFFLINE`` (or
    ``TRANSFORMERS_OFFLINE``), read now rather than at huggingface_hub's import, or ``ZOO_OFFLINE``."""
    return is_offline() or _is_true(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def hash_prefix_from_filename(url_or_name: str) -> str | None:
    """The sha256 prefix in a torch.hub style name (``resnet50-0676ba61.pth`` -> ``0676ba61``),
    or None when the name carries no hex part of at least 8 characters."""
    match = _HASH_IN_NAME.fullmatch(_basename(url_or_name))
    return match.group(1).lower() if match else None


_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 verified by this process


def verify_file(path: Path, sha256: str | None) -> str:
    """Return the full sha256 of ``path``, checked against ``sha256`` (a digest or a prefix of at
    least 8 hex characters) unless it is None.

    The digest is cached in a record keyed by the file's place in the cache (elsewhere: its
    absolute path) together with its size and mtime, so verifying an unchanged file again does
    not re-read it. A file that fails verification gets no record, and raises ChecksumError.
    """
    path = Path(path)
    expected = _normalize_expected(sha256)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise WeightsNotFoundError(f"Cannot verify {path}: the file does not exist.") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    known = _verified.get(key)  # verified in this process, unchanged since: what the record would say
    if known is not None and (expected is None or known.startswith(expected)):
        return known
    record = _read_record(path)
    unchanged = record is not None and record["size"] == stat.st_size and record["mtime_ns"] == stat.st_mtime_ns
    digest = record["sha256"] if unchanged else sha256_file(path)
    if unchanged and expected is not None and not digest.startswith(expected):
        unchanged, digest = False, sha256_file(path)  # the record is only a cache: the file's bytes decide
    if expected is not None and not digest.startswith(expected):
        raise ChecksumError(
            f"{path} failed verification: expected sha256 {describe_expected(expected)}, got {digest}. "
            f"The file is corrupt or is not the published one: delete {path} and fetch it again "
            "(or correct the expected sha256 if the publisher replaced the file)."
        )
    if not unchanged:
        _write_record(path, digest, stat)
    _verified[key] = digest
    return digest


def fetch(
    url: str,
    *,
    sha256: str | None,
    filename: str | None = None,
    progress: bool = True,
    retries: int = 3,
) -> Path:
    """Return ``$ZOO_HOME/downloads/<filename>`` holding the verified contents of ``url``,
    downloading it if it is not cached (or is cached but corrupt).

    The expected hash is ``sha256``, else the prefix in the URL's file name, else a sha256 the
    server sends as ``X-Linked-Etag``/``ETag``; with none of these the file is accepted with a
    warning and its hash is recorded, so a later change to the cached file is detected.

    A file torch.hub already downloaded (``torch.hub.get_dir()/checkpoints/<URL's file name>``)
    is used instead of downloading it again, when it matches the expected hash.
    """
    if urlsplit(url).scheme not in ("http", "https"):
        raise InvalidArgumentError(
            f"fetch() downloads http(s) URLs only, got {url!r}; read local files with load_state_dict_file() instead."
        )
    if retries < 1:
        raise InvalidArgumentError(f"retries is the total number of attempts, must be >= 1, got {retries}.")
    name = _checked_filename(filename if filename is not None else _basename(url), url)
    expected = _normalize_expected(sha256 if sha256 is not None else hash_prefix_from_filename(url))
    target = zoo_home() / "downloads" / name
    if target.exists() and not _writable(target.parent):
        return _verified_read_only(target, expected, url)
    with FileLock(_subdir("locks", "downloads") / f"{name}.lock"):
        if target.exists() and _cached_is_good(target, expected, url):
            return target
        if _from_torch_hub_cache(url, target, expected):
            return target
        if is_offline():
            raise WeightsNotFoundError(
                f"{name} is not in the zoo cache and ZOO_OFFLINE=1 is set, so it will not be "
                f"downloaded. Put the file at {target} (it comes from {url}; expected sha256 "
                f"{describe_expected(expected) if expected else 'unknown'}), or unset ZOO_OFFLINE."
            )
        _download(url, target, expected, progress, retries)
        return target


def _cached_is_good(target: Path, expected: str | None, url: str) -> bool:
    """Whether the cached ``target`` has the expected sha256 (else the one recorded at its
    download); a bad one is deleted, with a warning at `fetch`'s caller, to be downloaded again."""
    record = _read_record(target)
    pinned = expected or (record["sha256"] if record else None)
    try:
        verify_file(target, pinned)
    except ChecksumError as err:
        if is_offline():
            raise ChecksumError(
                f"{err} ZOO_OFFLINE=1 is set, so it cannot be downloaded again: put a good "
                f"copy at {target}, or unset ZOO_OFFLINE to re-download it from {url}."
            ) from None
        warnings.warn(f"{err} Downloading it again from {url}.", stacklevel=3)
        _forget(target)
        return False
    if pinned is None:
        _warn_unverified(target, url, stacklevel=3)
    return True


def _download(url: str, target: Path, expected: str | None, progress: bool, retries: int) -> None:
    """Download ``url`` to ``target`` in up to ``retries`` attempts (transient failures only),
    then record its sha256."""
    attempt = 1
    while True:
        try:
            got, checked = download_once(url, target, expected, progress)
            break
        except TransientError as err:
            if attempt >= retries:
                raise DownloadError(
                    f"{err} Gave up after {retries} attempt(s). Try again later, or download "
                    f"the file by hand to {target} and set ZOO_OFFLINE=1."
                ) from err.__cause__
            time.sleep(_BACKOFF_S * attempt)
            attempt += 1
    _write_record(target, got)
    if checked is None:
        _warn_unverified(target, url, stacklevel=3)


def fetch_state_dict(
    url: str,
    *,
    sha256: str | None,
    filename: str | None = None,
    progress: bool = True,
) -> Path:
    """Return a verified safetensors file with the weights published at ``url``.

    A published .safetensors file is just fetched. A pickled checkpoint is fetched, loaded once
    with ``torch.load(weights_only=True)``, unwrapped, saved as
    ``$ZOO_HOME/converted/<stem>.safetensors`` (keys as published) and then deleted; the
    converted file remembers the source's sha256 in its metadata, so later calls return it
    directly, as long as it is unchanged and was made from the expected source.
    """
    name = filename if filename is not None else _basename(url)
    if name.endswith(".safetensors"):
        return fetch(url, sha256=sha256, filename=filename, progress=progress)
    name = _checked_filename(name, url)
    expected = _normalize_expected(sha256 if sha256 is not None else hash_prefix_from_filename(url))
    converted = zoo_home() / "converted" / f"{Path(name).stem}.safetensors"
    if converted.exists() and not _writable(converted.parent):
        problem = _converted_problem(converted, expected)
        if problem is not None:
            raise ChecksumError(
                f"{problem} The cache is read-only: replace the file, or set ZOO_HOME to a writable folder."
            )
        return converted
    with FileLock(_subdir("locks", "converted") / f"{converted.name}.lock"):
        if converted.exists():
            problem = _converted_problem(converted, expected)
            if problem is None:
                return converted
            if is_offline():
                raise ChecksumError(
                    f"{problem} ZOO_OFFLINE=1 is set, so it cannot be rebuilt from {url}: delete {converted} "
                    "and unset ZOO_OFFLINE to convert it again, or replace it with a good copy."
                )
            warnings.warn(f"{problem} Converting it again from {url}.", stacklevel=2)
            _forget(converted)
        source = fetch(url, sha256=sha256, filename=filename, progress=progress)
        source_digest = verify_file(source, expected)
        try:
            tensors = standalone_tensors(load_state_dict_file(source))
        except WeightsError:  # a refused pickle (code to run) or corrupt bytes: not kept in the cache
            with FileLock(_subdir("locks", "downloads") / f"{source.name}.lock"):
                _forget(source)
            raise
        metadata = {"format": "pt", "zoo.source_url": url, _SOURCE_SHA256_KEY: source_digest}
        with atomic_path(converted) as tmp:
            save_file(tensors, tmp, metadata=metadata)
        verify_file(converted, None)  # records the hash that later calls check against
        with FileLock(_subdir("locks", "downloads") / f"{source.name}.lock"):
            _forget(source)
    return converted


# ---------------------------------------------------------------------------- helpers


def _basename(url_or_name: str) -> str:
    """The last path component of a URL or a file name, %-decoded, without query string
    ("" when the path ends with "/")."""
    return unquote(urlsplit(url_or_name).path.rsplit("/", 1)[-1])


def _checked_filename(name: str, url: str) -> str:
    """``name`` if it is safe as a single file name in the cache, else ValueError."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise InvalidArgumentError(
            f"Cannot derive a cache file name from {url!r} (got {name!r}); "
            "pass filename='<name>' with a plain file name."
        )
    return name


@functools.lru_cache(maxsize=256)
def _normalize_expected(sha256: str | None) -> str | None:
    """Lower-cased expected digest or prefix; ValueError if it is not 8-64 hex characters."""
    if sha256 is None:
        return None
    expected = sha256.strip().lower()
    if not (_MIN_PREFIX <= len(expected) <= 64 and _HEX.fullmatch(expected)):
        raise InvalidArgumentError(
            f"Expected sha256 {sha256!r} is not a hex digest: give the full 64-character "
            f"sha256 or a prefix of at least {_MIN_PREFIX} hex characters."
        )
    return expected


def _subdir(*parts: str) -> Path:
    """A folder of the cache to write into, created on demand."""
    path = zoo_home().joinpath(*parts)
    if not _writable_or_creatable(path):
        raise WeightsError(
            f"Cannot write to zoo's cache folder {path}: it is read-only. Set ZOO_HOME to a writable folder "
            "(files already in a read-only cache are still used)."
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK)


def _verified_read_only(target: Path, expected: str | None, url: str) -> Path:
    """A file in a read-only cache, verified without writing anything (no lock, no record)."""
    record = _read_record(target)
    pinned = expected or (record["sha256"] if record else None)
    if pinned is None:
        raise ChecksumError(
            f"{target} is in a read-only cache with no known sha256 to check it against (it comes from {url}). "
            "Pass sha256=..., or set ZOO_HOME to a writable folder so it can be downloaded and recorded."
        )
    verify_file(target, pinned)
    return target


MAX_RECORD_BYTES = 1 << 16  # a record is a few hundred bytes


def _record_path(path: Path, name: str | None = None) -> Path:
    key = hashlib.sha256((name or _record_name(path)).encode()).hexdigest()
    return zoo_home() / "records" / f"{key}.json"


def _record_name(path: Path) -> str:
    """How a record names ``path``: a file in the cache by its place in it (``$ZOO_HOME/converted/
    x.safetensors``), so that a cache copied or mounted elsewhere keeps its records; another file
    by its absolute path."""
    resolved = Path(path).resolve()
    try:
        return f"$ZOO_HOME/{resolved.relative_to(zoo_home().resolve()).as_posix()}"
    except (ValueError, WeightsError):  # outside the cache, or no cache (ZOO_HOME is a file)
        return str(resolved)


def _record_checksum(record: Mapping[str, Any]) -> str:
    fields = {k: record[k] for k in ("path", "size", "mtime_ns", "sha256")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _read_record(path: Path) -> dict[str, Any] | None:
    """The verification record of ``path``, or None if it is missing, unreadable, for another
    path, or fails its own checksum (a corrupt record is ignored, never trusted)."""
    for name in dict.fromkeys((_record_name(path), str(Path(path).resolve()))):  # then as older zoo named it
        record = _read_named_record(path, name)
        if record is not None:
            return record
    return None


def _read_named_record(path: Path, name: str) -> dict[str, Any] | None:
    """`_read_record` under the name ``name``."""
    try:
        record = read_json(_record_path(path, name), MAX_RECORD_BYTES)
        if (
            record["path"] == name
            and isinstance(record["size"], int)
            and isinstance(record["mtime_ns"], int)
            and SHA256_HEX.fullmatch(record["sha256"])
            and record["checksum"] == _record_checksum(record)
        ):
            return record
    except (OSError, ValueError, KeyError, TypeError, WeightsError):  # WeightsError: ZOO_HOME is a file
        pass
    return None


def _write_record(path: Path, digest: str, stat: os.stat_result | None = None) -> None:
    """Record ``path``'s digest with its size and mtime; skipped where the cache is read-only
    (the file is then hashed again on its next load)."""
    stat = stat or path.stat()
    record: dict[str, Any] = {
        "path": _record_name(path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest,
    }
    record["checksum"] = _record_checksum(record)
    try:
        target = _record_path(path)
    except WeightsError:  # ZOO_HOME is not a folder: the record is a cache, the file is verified all the same
        return
    if _writable_or_creatable(target.parent):
        write_bytes_atomic(target, json.dumps(record, indent=1).encode())


def _writable_or_creatable(folder: Path) -> bool:
    """Whether ``folder`` can be written, or created in the nearest existing parent that can."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return _writable(folder)


def _from_torch_hub_cache(url: str, target: Path, expected: str | None) -> bool:
    """Put torch.hub's copy of ``url`` at ``target`` if it has the expected hash; say whether it did.

    The file is hard-linked (copied across file systems), not read in place: zoo deletes a pickle
    from its downloads once converted, and that must never delete torch.hub's file. A file there
    that fails the hash is left alone, with a warning, and the caller downloads."""
    cached = Path(torch.hub.get_dir()) / "checkpoints" / _basename(url)
    if expected is None or not cached.is_file():
        return False
    try:
        with atomic_path(target) as tmp:
            tmp.unlink()
            try:
                os.link(cached, tmp)
            except OSError:
                shutil.copyfile(cached, tmp)
            digest = sha256_file(tmp)
            if not digest.startswith(expected):
                raise ChecksumError(
                    f"{cached} in torch.hub's cache has sha256 {digest}, not the expected {describe_expected(expected)}, "
                    f"so zoo leaves it alone and fetches {url} itself; delete {cached} if it is corrupt."
                )
    except ChecksumError as err:
        warnings.warn(str(err), stacklevel=3)
        return False
    _write_record(target, digest)
    return True


def _forget(path: Path) -> None:
    """Delete a cached file and its record."""
    path.unlink(missing_ok=True)
    _record_path(path).unlink(missing_ok=True)


def _warn_unverified(path: Path, url: str, stacklevel: int) -> None:
    warnings.warn(
        f"{path} (from {url}) could not be verified: no sha256 was given, the file name has no "
        "hash prefix and the server sent no sha256 ETag. Its hash is recorded so later changes "
        "are detected; pass sha256=... to verify it.",
        stacklevel=stacklevel + 1,
    )


def _converted_problem(path: Path, expected_source: str | None) -> str | None:
    """Why the converted file ``path`` cannot be used (corrupt, or made from a source other
    than ``expected_source``), or None when it is good."""
    record = _read_record(path)
    if record is None:
        return f"{path} has no valid verification record, so nothing vouches for its bytes."
    try:
        verify_file(path, record["sha256"])
        with open_safetensors(path) as f:
            source = (f.metadata() or {}).get(_SOURCE_SHA256_KEY)
    except WeightsError as err:  # a checksum that differs, or bytes that are no safetensors file
        return str(err)
    if expected_source is not None and not (source or "").startswith(expected_source):
        return (
            f"{path} was converted from a source with sha256 {source or 'unknown'}, "
            f"not the expected {describe_expected(expected_source)}."
        )
    return None
