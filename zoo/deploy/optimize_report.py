"""What `zoo.optimize` measured and chose (`Candidate`, `OptimizeReport`), and auto's choices
remembered per machine, model and input shape in ``$ZOO_HOME/optimize.json``; training's
``precision="auto"`` (`zoo.training.loop.speed`) reports and remembers its own the same way,
in ``train_speed.json``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from filelock import FileLock, Timeout

from zoo.errors import WeightsError
from zoo.store import download
from zoo.store.files import read_json, write_json

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")  # what zoo.optimize and --optimize take

CACHE_FILE = "optimize.json"


@dataclass
class Candidate:
    """One way of running the model, as measured: median seconds per call on the example
    input, speed-up over fp32 eager (timed in turn with it), and how its outputs compare
    with fp32 eager's."""

    name: str
    median_s: float | None = None
    speedup: float | None = None
    top1_agreement: float | None = None  # classifiers only
    max_abs_diff: float | None = None
    loss_gap: float | None = None  # training: relative gap of its mean probe loss to fp32's
    passed: bool = False
    note: str = ""  # why it was skipped or failed


@dataclass
class OptimizeReport:
    """What `optimize` measured and chose; ``cached`` means the choice came from an earlier
    call on this machine (its figures are that call's)."""

    precision: str
    speedup: float
    candidates: list[Candidate]
    cpu_capability: str
    amx: bool
    device: str
    cached: bool = False
    cache_key: str = field(default="", repr=False)
    baseline: str = "fp32 eager"  # what the speed-ups are over
    search: str = ""  # a budgeted search: its time, order and what it left untried

    def __str__(self) -> str:
        lines = [
            f"chose {self.precision} ({self.speedup:.2f}x {self.baseline}) on {self.device}, "
            f"CPU {self.cpu_capability}, AMX {'yes' if self.amx else 'no'}{' (cached)' if self.cached else ''}"
        ]
        if self.search:
            lines.append(f"  {self.search}")
        width = max((len(c.name) for c in self.candidates), default=0) + 2
        for c in self.candidates:
            ms = f"{c.median_s * 1e3:.2f} ms" if c.median_s is not None else "-"
            agreement = f"top-1 {c.top1_agreement:.2%}" if c.top1_agreement is not None else ""
            diff = f"max diff {c.max_abs_diff:.2g}" if c.max_abs_diff is not None else ""
            diff = f"loss gap {c.loss_gap:.2%}" if c.loss_gap is not None else diff
            status = (f"ok ({c.note})" if c.note else "ok") if c.passed else f"not used: {c.note}"
            lines.append(f"  {c.name:<{max(width, 17)}}{ms:>12}  {agreement:<15}{diff:<17}{status}")
        return "\n".join(lines)


LOCK_TIMEOUT_S = 60.0  # a run waits this long for another to finish writing its choice
MAX_CACHE_BYTES = 16 * 2**20  # a choices file larger than this was not written by zoo: it counts as none


def _read_cache(file: str = CACHE_FILE) -> dict[str, Any]:
    """The remembered choices, through zoo's one JSON reader (regular files up to
    `MAX_CACHE_BYTES`: a FIFO would block the read); a file it refuses counts as none."""
    try:
        data = read_json(download.zoo_home() / file, MAX_CACHE_BYTES)
    except WeightsError:
        return {}
    return data if isinstance(data, dict) else {}


def remembered(key: str, file: str = CACHE_FILE) -> tuple[str, list[Candidate]] | None:
    """The precision auto chose before under ``key`` and the candidates it measured then, or
    None (nothing remembered, or an entry this version cannot read)."""
    entry = _read_cache(file).get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("precision"), str):
        return None
    candidates = (
        [_candidate(c) for c in entry.get("candidates") or [None]]
        if isinstance(entry.get("candidates"), list)
        else [None]
    )
    return None if None in candidates else (entry["precision"], candidates)


_NUMBERS = ("median_s", "speedup", "top1_agreement", "max_abs_diff", "loss_gap")


def _candidate(values: Any) -> Candidate | None:
    """A remembered candidate, or None when the file's entry is not one (edited, another version)."""
    try:
        candidate = Candidate(**values)
    except TypeError:
        return None
    numbers_ok = all(
        v is None or isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for v in (getattr(candidate, n) for n in _NUMBERS)
    ) and all(v is None or v > 0 for v in (candidate.median_s, candidate.speedup))  # times and ratios are > 0
    ok = (
        numbers_ok
        and isinstance(candidate.name, str)
        and isinstance(candidate.passed, bool)
        and isinstance(candidate.note, str)
    )
    return candidate if ok else None


def write_cache(key: str, precision: str, candidates: list[Candidate], file: str = CACHE_FILE) -> None:
    """Remember auto's choice: read, changed and written back (atomically) under a lock, so
    that runs writing at once keep every entry; a read-only ``$ZOO_HOME`` just keeps nothing."""
    entry = {"precision": precision, "candidates": [asdict(c) for c in candidates]}
    write_entry(key, lambda _: entry, file)


def read_entry(key: str, file: str) -> Any:
    """The entry under ``key`` in ``$ZOO_HOME/file`` (None when there is none); its content is the caller's to check."""
    return _read_cache(file).get(key)


def write_entry(key: str, update: Callable[[Any], Any], file: str) -> None:
    """Set the entry under ``key`` to ``update(the entry there, or None)``, under a lock (see `write_cache`)."""
    try:
        lock = FileLock(download._subdir("locks") / f"{file}.lock", timeout=LOCK_TIMEOUT_S)
        with lock:
            data = _read_cache(file)
            data[key] = update(data.get(key))
            write_json(data, download.zoo_home() / file)
    except (OSError, WeightsError, Timeout):  # read-only, or a lock another run never let go of
        pass
