"""What the labels of shards say: a scan of local shards without a manifest (`scan_shards`:
their kind, classes and each shard's class counts), and which whole shards a sharded data set
holds out for validation (`hold_out`) so that validation represents every class: the last
shards when they do, else the shards that together cover the most classes (from the per-shard
class counts `zoo shards` records, or a scan). A hold-out that still lacks classes is said in
a warning naming them, and every hold-out in the run card's validation line (`HoldOut.note`)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo.errors import DataError
from zoo.loading.images import open_image
from zoo.training.data.labels import class_index
from zoo.training.data.shards.shard_files import IMAGE_EXTENSIONS, LABEL_EXTENSIONS, Shard, read_samples, text_of
from zoo.training.data.source import MAX_CLASS_INDEX, check_classes

MAX_LISTED = 10  # class names a warning lists


@dataclass(frozen=True)
class HoldOut:
    """The shards held out (indices, in shard order) and how, in words for the card."""

    held: list[int]
    note: str


def hold_out(where: str, shards: Sequence[Shard], held: int, classes: Sequence[str]) -> HoldOut:
    """``held`` whole shards of ``shards`` for validation, covering every class when they can;
    warns (naming the classes) when validation or training lacks some."""
    last = list(range(len(shards) - held, len(shards)))
    counts = [shard.class_counts for shard in shards]
    if not held:
        return HoldOut([], "none (--val-fraction 0)")
    if any(c is None for c in counts):
        return HoldOut(last, f"the last {_shards(shards, last)} (whole shards; their classes are not recorded)")
    chosen = last if not _missing(counts, last) else _covering(counts, held)
    names = _shards(shards, chosen)
    lacking = [classes[c] for c in _missing(counts, chosen)]
    rest = [i for i in range(len(shards)) if i not in chosen]
    untrained = [classes[c] for c in _missing(counts, rest)]
    if lacking:
        warnings.warn(
            f"{where}: validation ({names}) holds no samples of {len(lacking)} of {len(classes)} classes "
            f"({_listed(lacking)}): its accuracy says nothing of them. The shards are in class order; write them "
            "again with `zoo shards` (it shuffles), or pass --val-data",
            stacklevel=3,
        )
    if untrained:
        warnings.warn(f"{where}: training holds no samples of {_listed(untrained)}; pass --val-data", stacklevel=3)
    how = "the last" if chosen == last else "chosen to cover the most classes:"
    covered = f"lacks {_listed(lacking)}" if lacking else f"all {len(classes)} classes"
    return HoldOut(chosen, f"{how} {names} (whole shards; {covered})")


def _missing(counts: Sequence[Sequence[int] | None], chosen: Sequence[int]) -> list[int]:
    """The classes none of the ``chosen`` shards holds a sample of."""
    total = [sum(counts[i][c] for i in chosen) for c in range(len(counts[0] or ()))]  # type: ignore[index]
    return [c for c, n in enumerate(total) if n == 0]


def _covering(counts: Sequence[Sequence[int] | None], held: int) -> list[int]:
    """``held`` shards picked greedily, each adding the most classes not yet covered (later
    shards first on ties)."""
    chosen: list[int] = []
    covered: set[int] = set()
    for _ in range(held):
        best = max(
            (i for i in reversed(range(len(counts))) if i not in chosen),
            key=lambda i: len({c for c, n in enumerate(counts[i] or ()) if n} - covered),
        )
        chosen.append(best)
        covered |= {c for c, n in enumerate(counts[best] or ()) if n}
    return sorted(chosen)


def _shards(shards: Sequence[Shard], indices: Sequence[int]) -> str:
    names = [shards[i].name for i in indices]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} shard{'s' if len(names) > 1 else ''} ({shown})"


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def scan_shards(urls: list[str]) -> tuple[dict[str, Any], list[Shard]]:
    """Local shards without a manifest, read once: their kind, classes (``.cls`` indices, or
    class names sorted), image channels and size, and each shard's count (no sha256 to check)."""
    extensions: set[str] = set()
    indices: list[int] = []
    names: list[str] = []
    shards, ends = [], []
    for url in urls:
        number = 0
        for record in read_samples(Shard(url), frozenset(LABEL_EXTENSIONS)):
            number += 1
            extensions |= set(record) - {"__key__"}
            where = f"shard {url}, sample {record['__key__']!r}"
            if "cls" in record:
                indices.append(_scanned_index(where, record["cls"]))
            elif "txt" in record or "json" in record:
                names.append(text_of(where, record.get("txt") or record["json"]).strip().strip('"'))
        shards.append(Shard(url, number))
        ends.append(len(indices) + len(names))
    empty = [shard.url for shard in shards if not shard.samples]
    if empty:
        raise DataError(
            f"shard {empty[0]} holds no samples{f' (nor do {len(empty) - 1} more)' if len(empty) > 1 else ''}: "
            "an empty tar; write the shards again with `zoo shards`, or leave it out of --data"
        )
    kind = "images" if extensions & set(IMAGE_EXTENSIONS) else "tensors" if "npy" in extensions else "text"
    if kind == "text":
        names = []
    if indices and names:
        raise DataError(f"{urls[0]}...: some samples are labelled by KEY.cls, others by name; use one of the two")
    classes = [str(i) for i in range(max(indices) + 1)] if indices else sorted(set(names))
    labels = indices or [classes.index(n) for n in names]
    info: dict[str, Any] = {"kind": kind, "classes": classes}
    info["class_counts"] = np.bincount(labels, minlength=len(classes)).tolist() if labels else None
    if labels and len(labels) == sum(shard.samples or 0 for shard in shards):  # every sample labelled
        each = [np.bincount(labels[a:b], minlength=len(classes)) for a, b in zip([0, *ends], ends)]
        shards = [Shard(s.url, s.samples, None, tuple(c.tolist())) for s, c in zip(shards, each)]
    check_classes(urls[0], dict(zip(classes, info["class_counts"] or [])), "label samples of at least 2 classes")
    if kind == "images":
        record = next((r for r in read_samples(Shard(urls[0])) if any(e in r for e in IMAGE_EXTENSIONS)), None)
        if record is None:
            raise DataError(f"shard {urls[0]} holds no image (KEY.{', KEY.'.join(IMAGE_EXTENSIONS)}) to size the model")
        ext = next(e for e in IMAGE_EXTENSIONS if e in record)
        image = open_image(io.BytesIO(record[ext]), decode=False, name=f"shard {urls[0]}, {record['__key__']}")
        info["channels"] = 1 if image.mode in ("L", "1", "I", "I;16", "F") else 3
        info["image_size"] = [image.height, image.width]
    return info, shards


def _scanned_index(where: str, data: bytes) -> int:
    index = class_index(text_of(where, data), MAX_CLASS_INDEX)
    if index is None:
        raise DataError(
            f"{where}: KEY.cls holds {text_of(where, data).strip()[:40]!r}; it should be a class index 0, 1, ..."
        )
    return index
