"""WebDataset tar shards as files: what a ``--data`` spec names (brace ranges, ``::``-joined
lists, a folder of ``.tar``, local paths or ``http(s)://`` URLs), the manifest beside them
(`MANIFEST`: each shard's sample count and sha256), and the raw samples of one shard read as a
stream (`read_samples`), bounded in size and verified against the manifest when read to its end.

WebDataset's layout: the files of a sample are consecutive members ``KEY.EXT`` of the tar, KEY
the name up to the first dot of its base name; names from a shard are keys only, never paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from braceexpand import braceexpand

from zoo.errors import DataError, DataNotFoundError
from zoo.loading.images import MAX_IMAGE_PIXELS
from zoo.training.data.shards.brace_ranges import brace_count
from zoo.training.data.source import check_class_names, first_line

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "zoo-shards/1"
MAX_SHARDS = 100_000  # shards one spec may name
MAX_SPEC_CHARS = 64 * 1024  # a --data spec's length
MAX_MEMBER_BYTES = 64 * 2**20  # one file inside a shard (an image, a label, a text)
MAX_SHARD_BYTES = 64 * 2**30  # one shard
MAX_MANIFEST_BYTES = 64 * 2**20
MAX_FILES_PER_SAMPLE = 16
MIN_SAMPLE_BYTES = 1024  # a sample is at least two tar members, each a 512-byte header and its data
MAX_SAMPLES = MAX_SHARD_BYTES // MIN_SAMPLE_BYTES  # samples one shard of a manifest may count
URL_TIMEOUT_S = 60.0
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")
IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "webp")
LABEL_EXTENSIONS = ("cls", "txt", "json")
_META = re.compile(r"__[^/]*__($|/)")  # webdataset.tariterators' skip_meta


@dataclass(frozen=True)
class Shard:
    """One shard: where it is (a path or URL), its samples and sha256 (None: not known, e.g. a
    local folder without a manifest) and its name for messages."""

    url: str
    samples: int | None = None
    sha256: str | None = None
    class_counts: tuple[int, ...] | None = None  # its samples of each class, when recorded

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def looks_like_shards(source: object) -> bool:
    """Whether a ``--data`` value names shards: a URL, a ``::`` list, a ``.tar`` name or brace
    range, or a folder holding a manifest or only ``.tar`` files (cheap: lists one folder)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    if is_url(text) or "::" in text or re.search(r"\.tar(\.gz)?(\}|$)", text) or re.search(r"\{[^{}]*\.\.", text):
        return True
    path = Path(text).expanduser()
    if not path.is_dir():
        return False
    if (path / MANIFEST).is_file():
        return True
    try:
        names = [entry.name for entry in os.scandir(path) if not entry.name.startswith(".")]
    except OSError:
        return False
    return bool(names) and all(name.endswith(".tar") for name in names)


def expand_spec(spec: str) -> list[str]:
    """The shard paths or URLs of ``spec``: ``::``-joined parts, each brace-expanded
    (``train-{000000..000031}.tar``), or a folder's ``.tar`` files in name order."""
    path = Path(spec).expanduser()
    if not is_url(spec) and path.is_dir():
        urls = sorted(str(p) for p in path.iterdir() if p.name.endswith(".tar") and not p.name.startswith("."))
        if not urls:
            raise DataError(f"{path} holds no .tar shards; write some with `zoo shards DATA --out {path}`")
        return urls
    shown = spec if len(spec) <= 200 else spec[:200] + "..."
    if len(spec) > MAX_SPEC_CHARS:
        raise DataError(f"--data {shown!r} is over {MAX_SPEC_CHARS:,} characters; name the shards with a brace range")
    urls: list[str] = []
    for part in filter(None, spec.split("::")):
        try:  # counted before any is made: braceexpand makes a whole range at once
            names = brace_count(part, MAX_SHARDS)
            if len(urls) + names > MAX_SHARDS:
                raise DataError(
                    f"--data {shown!r} names more than {MAX_SHARDS:,} shards, the limit of one spec (counted "
                    "before expanding its braces); merge them into larger shards"
                )
            urls += braceexpand(part)
        except RecursionError:
            raise DataError(f"--data {shown!r}: braces nested too deep; check the braces") from None
        except ValueError as error:  # braceexpand's UnbalancedBracesError
            if isinstance(error, DataError):
                raise
            raise DataError(f"--data {shown!r}: {first_line(error)}; check the braces") from None
    if not urls:
        raise DataError(f"--data {spec!r} names no shards; e.g. 'shards/train-{{000000..000031}}.tar'")
    for url in urls:
        if not is_url(url) and not Path(url).expanduser().is_file():
            raise DataNotFoundError(
                f"shard {url} (from --data {spec!r}) does not exist; check the brace range, e.g. {{000000..000031}}"
            )
    urls = [url if is_url(url) else str(Path(url).expanduser()) for url in urls]
    _refuse_repeats(shown, urls)
    return urls


def _refuse_repeats(spec: str, urls: list[str]) -> None:
    """Refuse a spec naming one shard twice (as written, or the same file by another path): its
    samples would be read twice an epoch."""
    seen: dict[str, str] = {}
    for url in urls:
        same = _same(url)
        if same in seen:
            also = "" if seen[same] == url else f" (as {seen[same]})"
            raise DataError(
                f"--data {spec!r} names shard {url} twice{also}: its samples would be read twice an epoch; "
                "name each shard once"
            )
        seen[same] = url


def _same(url: str) -> str:
    """What names one shard: a URL as written, a file by its real path."""
    return url if is_url(url) else os.path.realpath(url)


def shared_shards(train: str | os.PathLike, val: str | os.PathLike) -> list[str]:
    """The shards ``val`` names that ``train`` names too (the same file by any path); [] when
    either names no shards or cannot be expanded (reading it says why)."""
    if not (looks_like_shards(train) and looks_like_shards(val)):
        return []
    try:
        trained = {_same(url) for url in expand_spec(os.fspath(train))}
        return [url for url in expand_spec(os.fspath(val)) if _same(url) in trained]
    except DataError:
        return []


def manifest_location(url: str) -> str:
    """Where the manifest of the shard at ``url`` lies: beside it."""
    if is_url(url):
        return url.rsplit("/", 1)[0] + "/" + MANIFEST
    return str(Path(url).parent / MANIFEST)


def read_manifest(location: str) -> dict[str, Any] | None:
    """The manifest at ``location`` (a path or URL), checked, or None when there is none."""
    try:
        with open_stream(location, missing_ok=True) as stream:
            text = stream.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(text) > MAX_MANIFEST_BYTES:
        raise DataError(f"{location} is over {MAX_MANIFEST_BYTES // 2**20} MiB; a shard manifest is much smaller")
    try:
        manifest = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise DataError(f"{location} is not JSON ({first_line(error)}); rewrite it with `zoo shards`") from None
    check_manifest(location, manifest)
    return manifest


def check_manifest(location: str, manifest: Any) -> None:
    """Refuse a manifest without the fields a run reads, naming the field."""
    fix = "rewrite the shards and their manifest with `zoo shards`"
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise DataError(f"{location}: format {found!r}, expected {MANIFEST_FORMAT!r}; {fix}")
    if manifest.get("kind") not in ("images", "tensors", "text"):
        raise DataError(f"{location}: kind {manifest.get('kind')!r} should be images, tensors or text; {fix}")
    classes = manifest.get("classes")
    if not isinstance(classes, list) or len(classes) < 2 or not all(isinstance(c, str) for c in classes):
        raise DataError(f"{location}: classes should be a list of at least 2 class names; {fix}")
    check_class_names(location, classes, "classes")
    counts = manifest.get("class_counts")
    if counts is not None and not (
        isinstance(counts, list)
        and len(counts) == len(classes)
        and all(_whole(c, 0, MAX_SAMPLES * MAX_SHARDS) for c in counts)
    ):
        raise DataError(f"{location}: class_counts should be a whole number >= 0 for each class; {fix}")
    if manifest["kind"] == "images":
        channels, size = manifest.get("channels"), manifest.get("image_size")
        if channels not in (None, 1, 3, 4) or isinstance(channels, bool):
            raise DataError(f"{location}: channels should be 1, 3 or 4, got {str(channels)[:20]}; {fix}")
        if size is not None and not (
            isinstance(size, list)
            and len(size) == 2
            and all(_whole(n, 1, MAX_IMAGE_PIXELS) for n in size)
            and size[0] * size[1] <= MAX_IMAGE_PIXELS
        ):
            raise DataError(
                f"{location}: image_size should be [height, width] of at most {MAX_IMAGE_PIXELS:,} pixels; {fix}"
            )
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards or len(shards) > MAX_SHARDS:
        raise DataError(f"{location}: shards should be a list of 1 to {MAX_SHARDS} entries; {fix}")
    for index, entry in enumerate(shards):
        where = f"{location}: shards[{index}]"
        if not isinstance(entry, dict) or not _NAME.fullmatch(str(entry.get("name"))) or entry["name"] in (".", ".."):
            raise DataError(f"{where}.name should be a file name beside the manifest (no folders); {fix}")
        if not _whole(entry.get("samples"), 1, MAX_SAMPLES):
            raise DataError(f"{where}.samples should be a whole number from 1 to {MAX_SAMPLES:,}; {fix}")
        if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
            raise DataError(f"{where}.sha256 should be 64 lowercase hex digits; {fix}")
        counts = entry.get("class_counts")
        if counts is not None and not (
            isinstance(counts, list)
            and len(counts) == len(classes)
            and all(_whole(c, 0, MAX_SAMPLES) for c in counts)
            and sum(counts) == entry["samples"]
        ):
            raise DataError(
                f"{where}.class_counts should be its samples of each class, adding up to its samples; {fix}"
            )


def _whole(value: Any, low: int, high: int) -> bool:
    """Whether a manifest's ``value`` is a whole number (not a bool) from ``low`` to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class open_stream:  # noqa: N801 (a context manager used like open())
    """A binary stream of a local file or an ``http(s)://`` URL; a missing one is a
    `DataNotFoundError` (FileNotFoundError with ``missing_ok``), other failures `DataError`."""

    def __init__(self, url: str, missing_ok: bool = False) -> None:
        self.url, self.missing_ok = url, missing_ok

    def __enter__(self) -> IO[bytes]:
        try:
            if is_url(self.url):
                self.stream = urllib.request.urlopen(self.url, timeout=URL_TIMEOUT_S)  # noqa: S310 (http(s) only)
            else:
                self.stream = _open_regular(self.url)
        except DataError:
            raise
        except (FileNotFoundError, urllib.error.HTTPError) as error:
            if isinstance(error, FileNotFoundError) or error.code == 404:
                if self.missing_ok:
                    raise FileNotFoundError(self.url) from None  # internal: read_manifest's "no manifest"
                raise DataNotFoundError(f"{self.url} does not exist; check the --data spec") from None
            raise DataError(f"{self.url}: cannot be read ({first_line(error)})") from None
        except (OSError, urllib.error.URLError, ValueError) as error:
            raise DataError(f"{self.url}: cannot be read ({first_line(error)}); check the path or URL") from None
        return self.stream

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


def _open_regular(path: str) -> IO[bytes]:
    """The local file ``path`` opened for reading, when it is a regular file (a link to one is
    followed): a FIFO would block the open and every read, a device never end. Checked on the
    opened file itself (non-blocking), so it cannot be swapped in between."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError(f"{path} is not a file (a folder, a FIFO or a device); check the --data spec")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _Hashed:
    """A binary stream read through: its bytes counted (refused over ``limit``) and hashed."""

    def __init__(self, stream: IO[bytes], name: str, limit: int = MAX_SHARD_BYTES) -> None:
        self.stream, self.name, self.limit = stream, name, limit
        self.sha256, self.size = hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size if size is not None and size >= 0 else 2**20)
        self.size += len(data)
        if self.size > self.limit:
            raise DataError(f"shard {self.name} is over {self.limit // 2**30} GiB; split it into smaller shards")
        self.sha256.update(data)
        return data

    def drain(self) -> None:
        while self.read(2**20):
            pass


def split_name(name: str) -> tuple[str, str] | None:
    """(KEY, EXT) of a member name (EXT lowercased), or None for names that are no sample file
    (no extension, hidden files; WebDataset's ``__meta__`` files, by its own rule: a key such as
    ``__0001`` is a sample there, so here too)."""
    folder, _, base = name.rpartition("/")
    if "." not in base or base.startswith(".") or _META.match(name):
        return None
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def read_samples(shard: Shard, keep: frozenset[str] | None = None) -> Iterator[dict[str, Any]]:
    """The raw samples of ``shard`` in order, ``{"__key__": KEY, EXT: bytes, ...}`` (only the
    extensions in ``keep``, when given). Read to its end, the shard is checked against its
    manifest entry (sample count, sha256). A truncated or damaged tar, a member over
    `MAX_MEMBER_BYTES`, or a file twice in one sample is a `DataError` naming the shard and key."""
    key = None
    count = 0
    with open_stream(shard.url) as raw:
        stream = _Hashed(raw, shard.name)
        tar = TarReader(stream)
        current: dict[str, Any] | None = None
        try:
            for name, size in tar.members():
                parts = split_name(name)
                if parts is None:
                    continue
                key, ext = parts
                if current is not None and current["__key__"] != key:
                    count += 1
                    yield current
                    current = None
                current = current or {"__key__": key}
                _check_member(shard, name, size, key, ext, current)
                # a file no decoder reads is skipped, never held
                current[ext] = tar.data() if keep is None or ext in keep else b""
        except (TarFormatError, OSError) as error:
            after = f"at sample {key!r}" if key is not None else "at its start"
            raise DataError(
                f"shard {shard.url} is damaged {after} ({first_line(error)}): a truncated or corrupt tar; "
                "rewrite it, or pass --skip-bad-rows (skip_bad=True) to skip and count what cannot be read"
            ) from None
        if current is not None:
            count += 1
            yield current
        stream.drain()
    _verify(shard, count, stream.sha256.hexdigest())


class TarFormatError(Exception):
    """Bytes that are no (whole) tar archive; `read_samples` says it as a `DataError`."""


class TarReader:
    """A tar archive read member by member from a stream, in one pass (POSIX ustar and pax
    ``path`` records, GNU long names): each regular file's name and size, its data read only
    when asked (`data`), else skipped. Faster than `tarfile`'s stream mode, and nothing of a
    member is read before its size is checked."""

    def __init__(self, stream: _Hashed) -> None:
        self.stream, self.unread, self.size = stream, 0, 0

    def members(self) -> Iterator[tuple[str, int]]:
        long_name, first = None, self._exact(2, eof_ok=True)
        if first == b"\x1f\x8b":  # gzip's magic: compressed, not "damaged" (WebDataset reads .tar.gz)
            raise DataError(
                f"shard {self.stream.name} is gzip-compressed (.tar.gz); zoo streams uncompressed .tar shards: "
                "gunzip it, or write the shards with `zoo shards`"
            )
        while True:
            header, first = first + self._exact(512 - len(first), eof_ok=not first), b""
            if not header or header.count(0) == 512:  # the end-of-archive blocks (or a missing end)
                return
            size, kind = _checked_header(header)
            padded = -(-size // 512) * 512
            if kind in (b"L", b"x", b"g"):  # a long name or pax records for the next member
                if size > MAX_MEMBER_BYTES:
                    raise TarFormatError(f"a tar extended header of {size:,} bytes")
                data = self._exact(padded)[:size]
                long_name = _long_name(kind, data) or long_name
                continue
            name, long_name = long_name or _header_name(header), None
            if kind not in (b"0", b"\0", b"7"):  # folders, links, devices: not sample files
                self._skip(padded)
                continue
            self.unread, self.size = padded, size
            yield name, size
            self._skip(self.unread)

    def data(self) -> bytes:
        """The data of the member just yielded."""
        data = self._exact(self.unread)[: self.size]
        self.unread = 0
        return data

    def _exact(self, size: int, eof_ok: bool = False) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.stream.read(left)
            if not chunk:
                if eof_ok and left == size:
                    return b""
                raise TarFormatError(f"unexpected end of data ({size - left} of {size} bytes)")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _skip(self, size: int) -> None:
        while size:
            size -= len(self._exact(min(size, 2**20)))


def _checked_header(header: bytes) -> tuple[int, bytes]:
    """(size, type flag) of a 512-byte tar header whose checksum holds."""
    stored = _number(header[148:156])
    unsigned = sum(header[:148]) + 8 * 32 + sum(header[156:])
    if stored != unsigned and stored != unsigned - 256 * sum(b > 127 for b in header[:148] + header[156:]):
        raise TarFormatError("a tar header with a wrong checksum")  # (some tars sum signed bytes)
    return _number(header[124:136]), header[156:157]


def _number(field: bytes) -> int:
    """A tar header's number: octal text, or base-256 when its first bit is set."""
    if field and field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.replace(b"\0", b" ").strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarFormatError(f"a tar header number {text[:12]!r}") from None


def _header_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:263] == b"ustar\x00":  # POSIX ustar: a prefix for long paths
        prefix = header[345:500].split(b"\0", 1)[0]
        name = prefix + b"/" + name if prefix else name
    return name.decode("utf-8", "replace")


def _long_name(kind: bytes, data: bytes) -> str | None:
    """The name a GNU long-name member or a pax ``path`` record gives the next member."""
    if kind == b"L":
        return data.split(b"\0", 1)[0].decode("utf-8", "replace")
    if kind == b"x":
        for record in data.split(b"\n"):
            _, _, field = record.partition(b" ")
            if field.startswith(b"path="):
                return field[5:].decode("utf-8", "replace")
    return None


def _check_member(shard: Shard, name: str, size: int, key: str, ext: str, current: dict[str, Any]) -> None:
    """A member of sample ``key`` within the bounds: not too large, not twice, not too many."""
    where = f"shard {shard.url}, sample {key!r}"
    if size > MAX_MEMBER_BYTES:
        raise DataError(
            f"{where}: {name[:100]} is {size:,} bytes, over the {MAX_MEMBER_BYTES // 2**20} MiB limit "
            "for one file of a sample; shrink it"
        )
    if ext in current:
        raise DataError(f"{where}: {key}.{ext} appears twice; keys must be unique within a shard")
    if len(current) > MAX_FILES_PER_SAMPLE:
        raise DataError(f"{where} has more than {MAX_FILES_PER_SAMPLE} files; is KEY the name up to the first dot?")


def _verify(shard: Shard, count: int, sha256: str) -> None:
    """A shard read to its end against its manifest entry."""
    if shard.samples is not None and count != shard.samples:
        raise DataError(
            f"shard {shard.url} holds {count} samples, its manifest says {shard.samples}: the shard was cut short "
            "or replaced; rewrite it (and its manifest) with `zoo shards`"
        )
    if shard.sha256 is not None and sha256 != shard.sha256:
        raise DataError(
            f"shard {shard.url} has sha256 {sha256[:16]}..., its manifest says {shard.sha256[:16]}...: the shard "
            "was damaged or replaced; rewrite it (and its manifest) with `zoo shards`"
        )


def text_of(where: str, data: bytes) -> str:
    """``data`` as UTF-8 text; else a `DataError` naming ``where``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where}: a text file that is not UTF-8; save it as UTF-8") from None
