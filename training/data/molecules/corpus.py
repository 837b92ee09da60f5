"""A pretraining corpus for the molecule models and its targets, the way chemprop's CheMeleon
pretrains an MPNN on molecular descriptors before fine-tuning it on a small property set:

- `MOSES`: the corpus entry, stated once: the ZINC "clean leads" SMILES of the MOSES benchmark
  (Polykovskiy et al., 2020), shipped in the ``molsets`` wheel on the package index (MIT). The
  wheel is read as a zip file of data: the package is never installed or imported (it pins
  ancient dependencies);
- `corpus_file`: that wheel, downloaded once into zoo's cache by zoo's verified downloader, or a
  local copy, each checked against the entry's size and sha256;
- `corpus_smiles`: one member's SMILES, streamed from the zip without extracting it, bounded,
  or a seeded sample of them that is the same on every machine;
- `descriptor_targets`: RDKit's descriptors of molecules as a float64 array with a mask of the
  values that exist (never a silent 0), a descriptor that is a downstream target left out by name.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import heapq
import multiprocessing
import warnings
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from tqdm import tqdm

from zoo.bounds import SEED_MAX
from zoo.errors import (
    ChecksumError,
    DataError,
    DataNotFoundError,
    DownloadError,
    InvalidArgumentError,
    WeightsNotFoundError,
)
from zoo.training.data.molecules import mordred_descriptors as mordred

MAX_MEMBER_BYTES = 256 << 20  # decompressed bytes of one member read (MOSES' train set is 58 MB)
MAX_CORPUS_SMILES = 300  # characters of one SMILES; longer lines are skipped and counted (MOSES': at most 57)
MAX_MAGNITUDE = 1e10  # a descriptor value beyond this is missing (Ipc grows to 1e30 and more on large molecules)
PROGRESS_FROM = 1_000  # molecules from which `descriptor_targets` shows a progress bar
CHUNK = 256  # molecules per task of `descriptor_targets`


@dataclass(frozen=True)
class CorpusMember:
    """One file of a corpus wheel: the name `corpus_smiles` takes, its path in the zip and its molecules."""

    name: str
    path: str
    molecules: int


@dataclass(frozen=True)
class Corpus:
    """A corpus of SMILES shipped as gzip CSV files inside a wheel, and how to verify the wheel."""

    name: str
    url: str
    sha256: str
    size: int
    members: tuple[CorpusMember, ...]
    licence: str
    header: str = "SMILES"

    @property
    def filename(self) -> str:
        """The wheel's file name, as published."""
        return self.url.rsplit("/", 1)[-1]

    def member(self, name: str) -> CorpusMember:
        """The member called ``name``; an `InvalidArgumentError` naming the others if none is."""
        for member in self.members:
            if member.name == name:
                return member
        names = ", ".join(repr(m.name) for m in self.members)
        raise InvalidArgumentError(f"member={name!r}: the {self.name} corpus has no such member; pass one of {names}")


MOSES = Corpus(
    name="moses",
    url="https://files.pythonhosted.org/packages/ca/04/335f23e9ae95ca381ac7c3f335303dbbeb0f8a604d167891cf60c9360178/"
    "molsets-0.3.1-py3-none-any.whl",
    sha256="7f4450e3ebecebe79c3a2a55950c93daddee071120daf64a163d03481e811d34",
    size=51_584_291,
    members=(
        CorpusMember("train", "moses/dataset/data/train.csv.gz", 1_584_663),
        CorpusMember("test", "moses/dataset/data/test.csv.gz", 176_074),
        CorpusMember("test_scaffolds", "moses/dataset/data/test_scaffolds.csv.gz", 176_225),
    ),
    licence="MIT (the molsets wheel, MOSES: ZINC clean leads)",
)
CORPORA = {MOSES.name: MOSES}


# ---------------------------------------------------------------------------- the wheel


def corpus_file(
    cache_dir: str | Path | None = None,
    wheel: str | Path | None = None,
    *,
    corpus: Corpus = MOSES,
    progress: bool = True,
) -> Path:
    """The corpus wheel, verified: ``wheel``, a local copy the user has (its size and sha256
    must be the entry's, else a `ChecksumError` naming the file and the expected hash), else
    the copy in ``cache_dir`` (default: zoo's cache, ``$ZOO_HOME/downloads``), downloaded there
    once if it is missing or corrupt (sha256 checked as it streams, written atomically)."""
    if wheel is not None:
        return _checked_wheel(Path(wheel).expanduser(), corpus)
    if cache_dir is None:
        from zoo.store.download import fetch

        try:
            return fetch(corpus.url, sha256=corpus.sha256, progress=progress)
        except (DownloadError, WeightsNotFoundError) as err:
            raise type(err)(f"{err} {_by_hand(corpus)}") from err
    return _fetch_into(Path(cache_dir).expanduser(), corpus, progress)


def _by_hand(corpus: Corpus) -> str:
    return f"Or download {corpus.url} by hand (sha256 {corpus.sha256}) and pass its path as corpus_file(wheel=PATH)."


def _checked_wheel(path: Path, corpus: Corpus) -> Path:
    """``path`` if it is the corpus wheel (size, then sha256), else a `ChecksumError` naming it."""
    from zoo.store.download import verify_file

    if not path.is_file():
        raise DataNotFoundError(
            f"wheel={str(path)!r}: no such file; pass the path of {corpus.filename} (from {corpus.url}), "
            "or no wheel to let zoo download it"
        )
    size = path.stat().st_size
    digest = None if size != corpus.size else verify_file(path, None)
    if digest != corpus.sha256:
        got = f"sha256 {digest}" if digest else f"{size:,} bytes, not {corpus.size:,}"
        raise ChecksumError(
            f"{path} is not the {corpus.name} corpus wheel {corpus.filename}: expected sha256 {corpus.sha256}, "
            f"got {got}. Download it again from {corpus.url}, or pass no wheel to let zoo download it."
        )
    return path


def _fetch_into(folder: Path, corpus: Corpus, progress: bool) -> Path:
    """The wheel in ``folder``, downloaded there (one verified, atomic attempt) when it is missing
    or corrupt (a corrupt copy is replaced, with a warning)."""
    from zoo.store.download import is_offline
    from zoo.store.http_download import TransientError, download_once

    target = folder / corpus.filename
    if target.exists():
        try:
            return _checked_wheel(target, corpus)
        except ChecksumError as err:
            if is_offline():
                raise ChecksumError(f"{err} ZOO_OFFLINE=1 is set, so it cannot be downloaded again.") from None
            warnings.warn(f"{err} Downloading it again.", stacklevel=3)
    if is_offline():
        raise WeightsNotFoundError(
            f"{target} does not exist and ZOO_OFFLINE=1 is set, so it will not be downloaded: put the wheel "
            f"there (from {corpus.url}, sha256 {corpus.sha256}), or unset ZOO_OFFLINE."
        )
    try:
        download_once(corpus.url, target, corpus.sha256, progress)
    except TransientError as err:
        raise DownloadError(f"{err} Try again later. {_by_hand(corpus)}") from err
    return target


# ---------------------------------------------------------------------------- the SMILES


@dataclass(frozen=True)
class CorpusSmiles:
    """SMILES read from a corpus member: ``smiles`` in the member's order, ``lines`` the member's
    data lines (after the header) and ``skipped`` those that are no SMILES (empty, longer than
    `MAX_CORPUS_SMILES` characters, not printable ASCII, or holding a space)."""

    smiles: list[str]
    lines: int
    skipped: int


def corpus_smiles(
    path: str | Path,
    member: str = "train",
    limit: int | None = None,
    seed: int = 0,
    *,
    corpus: Corpus = MOSES,
    max_bytes: int = MAX_MEMBER_BYTES,
) -> CorpusSmiles:
    """The SMILES of one member of the corpus wheel at ``path`` (`corpus_file`'s), streamed from
    the zip (nothing is extracted to disk), at most ``max_bytes`` decompressed. With ``limit``,
    a sample of that many: the SMILES whose keyed hash (BLAKE2b, key ``seed``) is smallest, so
    the same limit and seed give the same molecules on every machine, and a smaller limit's
    sample is part of a larger one's."""
    entry = corpus.member(member)
    if limit is not None:
        _check_int("limit", limit, 1, None, "a number of molecules, e.g. limit=100_000, or None for all")
    _check_int("seed", seed, 0, SEED_MAX, "e.g. seed=0")
    _check_int("max_bytes", max_bytes, 1, None, f"a number of bytes, e.g. {MAX_MEMBER_BYTES}")
    where = f"{path} ({entry.path})"
    chosen = _Sample(limit, seed)
    lines = skipped = 0
    try:
        with _open_member(Path(path), entry.path, corpus) as raw, gzip.GzipFile(fileobj=raw) as stream:
            rows = _bounded_lines(stream, max_bytes, where)
            _check_header(next(rows, None), corpus, where)
            for text in rows:
                lines += 1
                if text is None:
                    skipped += 1
                else:
                    chosen.add(text)
    except DataError:  # zoo's own (a missing file is one, and an OSError too)
        raise
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        raise DataError(
            f"{where} cannot be read ({err}): the wheel is corrupt; fetch it again with corpus_file()"
        ) from err
    return CorpusSmiles(chosen.smiles(), lines, skipped)


def _check_int(name: str, value: Any, low: int, high: int | None, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"from {low:,} to {high:,}" if high is not None else f"at least {low:,}"
        raise InvalidArgumentError(f"{name}={value!r}: must be an integer {span}; {hint}")


def _open_member(path: Path, member: str, corpus: Corpus) -> IO[bytes]:
    """``member`` of the zip at ``path``, opened for streaming; `DataError` naming what is wrong."""
    if not path.is_file():
        raise DataNotFoundError(f"{path}: no such file; pass the wheel corpus_file() returns")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(
            f"{path} is not a zip file ({err}); pass the {corpus.filename} wheel corpus_file() returns"
        ) from None
    try:
        return archive.open(member)
    except KeyError:
        raise DataError(
            f"{path} has no {member}: it is not the {corpus.name} corpus wheel {corpus.filename}; "
            "pass the wheel corpus_file() returns"
        ) from None
    finally:
        archive.close()  # the member keeps its own handle on the file


def _bounded_lines(stream: IO[bytes], max_bytes: int, where: str) -> Iterator[str | None]:
    """Each line of ``stream``, stripped, or None for one that is no SMILES (over `MAX_CORPUS_SMILES`
    characters, read no further than that; empty; not printable ASCII; a space); a `DataError`
    once more than ``max_bytes`` are read."""
    total = 0
    limit = MAX_CORPUS_SMILES + 2  # and "\r\n"
    while line := stream.readline(limit):
        total += len(line)
        overlong = len(line) == limit and not line.endswith(b"\n")
        rest = line if overlong else b"\n"
        while rest and not rest.endswith(b"\n") and total <= max_bytes:  # the rest of an overlong line
            rest = stream.readline(1 << 16)
            total += len(rest)
        if total > max_bytes:
            raise DataError(
                f"{where} holds more than {max_bytes:,} bytes decompressed, over the limit (max_bytes); it is "
                "not the published corpus, or pass a larger max_bytes"
            )
        text = "" if overlong else line.strip().decode("ascii", "replace")
        good = 0 < len(text) <= MAX_CORPUS_SMILES and text.isascii() and text.isprintable() and " " not in text
        yield text if good else None


def _check_header(first: str | None, corpus: Corpus, where: str) -> None:
    if first != corpus.header:
        found = "nothing" if first is None else repr(first)
        raise DataError(
            f"{where} starts with {found}, not the header line {corpus.header!r}: it is not the {corpus.name} "
            "corpus; pass the wheel corpus_file() returns"
        )


class _Sample:
    """The SMILES kept: all of them (no limit), else the ``limit`` of smallest keyed hash, in file order."""

    def __init__(self, limit: int | None, seed: int) -> None:
        self.limit, self.key = limit, seed.to_bytes(8, "little")
        self.rows: list[tuple[int, int, str]] = []  # (-hash, -index, SMILES): a max-heap under a limit
        self.index = 0

    def add(self, text: str) -> None:
        self.index += 1
        if self.limit is None:
            self.rows.append((0, -self.index, text))
            return
        rank = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=self.key).digest(), "little")
        if len(self.rows) < self.limit:
            heapq.heappush(self.rows, (-rank, -self.index, text))
        elif rank < -self.rows[0][0]:
            heapq.heapreplace(self.rows, (-rank, -self.index, text))

    def smiles(self) -> list[str]:
        return [text for _, _, text in sorted(self.rows, key=lambda row: -row[1])]


# ---------------------------------------------------------------------------- the targets


@dataclass(frozen=True)
class DescriptorTargets:
    """RDKit descriptors of molecules: ``values`` [N, D] float64 (NaN where a value is missing:
    not finite, beyond `MAX_MAGNITUDE`, or its function failed), ``present`` [N, D] where it is
    not, ``names`` the D descriptors, ``kept`` [N] the index in the input of each row, ``dropped``
    (index, why) of each molecule left out, and the RDKit version that computed them."""

    values: np.ndarray
    present: np.ndarray
    names: tuple[str, ...]
    kept: np.ndarray
    dropped: tuple[tuple[int, str], ...]
    rdkit_version: str

    @property
    def missing(self) -> dict[str, int]:
        """Descriptor name -> molecules missing its value, for those missing any."""
        counts = (~self.present).sum(axis=0)
        return {name: int(n) for name, n in zip(self.names, counts) if n}


def descriptor_names() -> tuple[str, ...]:
    """Every descriptor of RDKit's ``rdkit.Chem.Descriptors.descList``, in its order."""
    from rdkit.Chem import Descriptors

    return tuple(name for name, _ in Descriptors.descList)


def chosen_names(names: Sequence[str] | str | None = None, exclude: Sequence[str] | str = ()) -> tuple[str, ...]:
    """``names`` (default: every RDKit descriptor; Mordred's as ``mordred:NAME``) without
    ``exclude``; an `InvalidArgumentError` naming a name RDKit does not have (a misspelt
    exclusion would keep a downstream target in)."""
    known = descriptor_names()
    asked = (*(_as_tuple(names) if names is not None else ()), *_as_tuple(exclude))
    if any(str(name).startswith(mordred.PREFIX) for name in asked):
        known += mordred.mordred_names()
    chosen = _names("names", names, known) if names is not None else known
    if len(set(chosen)) != len(chosen):
        twice = sorted({n for n in chosen if chosen.count(n) > 1})
        raise InvalidArgumentError(f"names: {', '.join(twice)} given twice; name each descriptor once")
    left_out = set(_names("exclude", exclude, known))
    kept = tuple(n for n in chosen if n not in left_out)
    if not kept:
        raise InvalidArgumentError("names and exclude leave no descriptor; exclude fewer")
    return kept


def _as_tuple(names: Sequence[str] | str) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else tuple(names)


def _names(argument: str, names: Sequence[str] | str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = _as_tuple(names)
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=3)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else (f"rdkit.Chem.Descriptors.descList lists RDKit's; Mordred's are {mordred.PREFIX}NAME")
            )
            whose = "Mordred" if str(name).startswith(mordred.PREFIX) else "RDKit"
            raise InvalidArgumentError(f"{argument}: {whose} has no descriptor {name!r}; {hint}")
    return names


def descriptor_targets(
    smiles: Sequence[str],
    names: Sequence[str] | str | None = None,
    exclude: Sequence[str] | str = (),
    *,
    processes: int = 1,
    progress: bool = True,
) -> DescriptorTargets:
    """RDKit's descriptors (``names``, default all of ``Descriptors.descList``, and Mordred's
    named ``mordred:NAME`` (`mordred_descriptors`, about 75 ms a molecule), less ``exclude``:
    leave out a descriptor that is a downstream target, e.g. ``exclude=["TPSA"]``) of each of
    ``smiles``, read by zoo's SMILES reader; a molecule it cannot read, or with no atoms or over
    zoo's atom limit, is dropped and named in ``dropped``. ``processes`` workers share the
    molecules (about 1 to 5 ms a molecule for 200 descriptors); a progress bar from
    `PROGRESS_FROM` molecules. The arrays take 9 bytes per molecule and descriptor (1M
    molecules x 217: about 2 GB)."""
    from zoo.loading.smiles import require_rdkit  # and, imported here, in forked workers too

    require_rdkit()
    import rdkit

    if isinstance(smiles, str) or not isinstance(smiles, Sequence):
        raise InvalidArgumentError(f"smiles: a list of SMILES, got {type(smiles).__name__}; e.g. ['CCO', 'c1ccccc1O']")
    _check_int("processes", processes, 1, 1024, "the number of worker processes, e.g. processes=4")
    chosen = chosen_names(names, exclude)
    values = np.full((len(smiles), len(chosen)), np.nan)
    present = np.zeros(values.shape, dtype=bool)
    kept: list[int] = []
    dropped: list[tuple[int, str]] = []
    tasks = [(list(smiles[i : i + CHUNK]), chosen) for i in range(0, len(smiles), CHUNK)]
    bar = tqdm(total=len(smiles), unit="mol", desc="descriptors", disable=not progress or len(smiles) < PROGRESS_FROM)
    with bar, worker_map(min(processes, len(tasks))) as mapper:
        for start, (block, found, problems) in zip(range(0, len(smiles), CHUNK), mapper(_descriptor_rows, tasks)):
            for offset, problem in enumerate(problems):
                if problem is not None:
                    dropped.append((start + offset, problem))
                    continue
                values[len(kept)], present[len(kept)] = block[offset], found[offset]
                kept.append(start + offset)
            bar.update(len(problems))
    rows = len(kept)
    return DescriptorTargets(
        values[:rows], present[:rows], chosen, np.asarray(kept, dtype=np.int64), tuple(dropped), rdkit.__version__
    )


class worker_map:  # noqa: N801  (a context manager used as a function)
    """``map`` in this process (one process), else a pool's ordered ``imap`` over ``processes``
    workers, ended with the block (an early ``break`` stops them): the molecule workers' one pool."""

    def __init__(self, processes: int) -> None:
        self.pool = multiprocessing.get_context().Pool(processes) if processes > 1 else None

    def __enter__(self) -> Any:
        return self.pool.imap if self.pool is not None else map

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _descriptor_rows(task: tuple[list[str], tuple[str, ...]]) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """For a chunk of SMILES: [n, D] values (NaN where missing), [n, D] whether present, and per
    molecule why it was dropped (None: read). Runs in a worker, so it imports what it needs."""
    from rdkit.Chem import Descriptors

    from zoo.loading.smiles import mol_problem, parse_smiles, quiet_rdkit

    smiles, names = task
    by_rdkit = dict(Descriptors.descList)
    functions = [(column, by_rdkit.get(name)) for column, name in enumerate(names)]
    by_mordred = [column for column, name in enumerate(names) if name.startswith(mordred.PREFIX)]
    calc = mordred.calculator(tuple(names[column] for column in by_mordred)) if by_mordred else None
    values = np.full((len(smiles), len(names)), np.nan)
    problems: list[str | None] = []
    with quiet_rdkit(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a descriptor's RuntimeWarning on a molecule: its value is checked below
        for row, text in enumerate(smiles):
            mol = parse_smiles(text) if isinstance(text, str) else None
            problem = mol_problem(mol) if isinstance(text, str) else f"not a string but {type(text).__name__}"
            problems.append(problem)
            if problem is None:
                for column, function in functions:
                    values[row, column] = _value(function, mol) if function is not None else np.nan
                if calc is not None:
                    values[row, by_mordred] = mordred.mordred_values(calc, mol)
    present = np.isfinite(values) & (np.abs(values) <= MAX_MAGNITUDE)
    values[~present] = np.nan
    return values, present, problems


def _value(function: Any, mol: Any) -> float:
    """A descriptor's value as a float, NaN when the function fails on the molecule."""
    try:
        return float(function(mol))
    except Exception:  # noqa: BLE001  (RDKit's descriptors raise assorted errors on odd molecules)
        return float("nan")
