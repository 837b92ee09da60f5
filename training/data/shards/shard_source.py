"""WebDataset tar shards as training data that streams: ``--data 'shards/train-{000000..000031}.tar'``
(brace ranges, a folder of ``.tar``, local paths or ``http(s)://`` URLs; see
`zoo.training.data.shards.shard_files`) becomes a `ShardStream`, an IterableDataset that never holds
more than its shuffle buffer of samples.

Each sample is read exactly once per epoch across nodes, processes and DataLoader workers: the
epoch's order is the shards in a seeded order, and each process takes a contiguous run of
``ceil(N / processes)`` samples of it (the last ones wrap around to the first samples, as
`torch.utils.data.DistributedSampler` pads), shuffled by a buffer, started ``skip`` samples in
after a resume; its DataLoader workers take every ``workers``-th batch of that run, so the
batches come out as with no workers. The Trainer's sampler (`zoo.training.loop.loaders`) says
the epoch, rank and position: `ShardStream.bind_sampler` reads them.

Layouts: images ``KEY.png``/``.jpg``/``.jpeg``/``.webp`` with ``KEY.cls`` (a class index) or
``KEY.txt``/``KEY.json`` (a class name, or ``{"label": ...}``); tensors ``KEY.npy`` + ``KEY.cls``;
text rows ``KEY.txt`` + ``KEY.cls``. A bad sample or shard is a `DataError` naming the shard and
key, or with ``skip_bad`` replaced by the sample before it and counted (the batch count every
process agrees on stays the same).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import math
import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from zoo.bounds import count
from zoo.errors import DataError, InvalidArgumentError
from zoo.loading.images import open_image
from zoo.training.data.labels import class_index
from zoo.training.data.shards.shard_files import (
    IMAGE_EXTENSIONS,
    LABEL_EXTENSIONS,
    MANIFEST,
    MIN_SAMPLE_BYTES,
    Shard,
    expand_spec,
    is_url,
    manifest_location,
    read_manifest,
    read_samples,
    text_of,
)
from zoo.training.data.shards.shard_labels import hold_out, scan_shards
from zoo.training.data.source import MAX_CLASS_INDEX, DataSource, WorkerDataError
from zoo.training.data.text.text_files import TextBatches
from zoo.training.loop.loaders import EpochSampler, ShardSampler

log = logging.getLogger(__name__)

SHUFFLE_BUFFER = 1000  # samples held to shuffle within a process's run (raw bytes, decoded after)
BUFFER = count(0, 1_000_000)
CHECKED_EPOCH = 1_000_000  # samples an epoch may claim before each local shard's size is checked against its count
Record = dict[str, Any]


class SampleDecoder:
    """Raw sample -> training sample: ``(image, label)``, ``(tensor, label)`` or ``(text, label)``,
    images through zoo's one image reader brought to ``channels`` and ``transform``ed; what cannot
    be decoded is a `DataError` naming the shard and key."""

    def __init__(
        self, kind: str, classes: Sequence[str], channels: int | None = None, transform: Callable | None = None
    ) -> None:
        self.kind, self.classes, self.channels, self.transform = kind, list(classes), channels, transform
        self.index = {name: i for i, name in enumerate(self.classes)}
        body = {"images": IMAGE_EXTENSIONS, "tensors": ("npy",), "text": ("txt",)}[kind]
        self.keep = frozenset(body + (("cls",) if kind == "text" else LABEL_EXTENSIONS))

    def with_transform(self, transform: Callable | None) -> SampleDecoder:
        return SampleDecoder(self.kind, self.classes, self.channels, transform)

    def __call__(self, record: Record) -> tuple[Any, int]:
        where = f"shard {record['__shard__']}, sample {record['__key__']!r}"
        if self.kind == "text":
            if "txt" not in record or "cls" not in record:
                raise DataError(f"{where}: a text row needs KEY.txt (the text) and KEY.cls (its class index)")
            return text_of(where, record["txt"]), self.label(where, record, ("cls",))
        if self.kind == "tensors":
            if "npy" not in record:
                raise DataError(f"{where}: no KEY.npy; tensor shards hold KEY.npy + KEY.cls")
            sample: Any = _array(where, record["npy"])
        else:
            ext = next((e for e in IMAGE_EXTENSIONS if e in record), None)
            if ext is None:
                raise DataError(f"{where}: no image (KEY.{', KEY.'.join(IMAGE_EXTENSIONS)})")
            image = open_image(io.BytesIO(record[ext]), channels=self.channels, name=f"{where} ({ext})")
            sample = self.transform(image) if self.transform else image
        return sample, self.label(where, record, LABEL_EXTENSIONS)

    def label(self, where: str, record: Record, extensions: Sequence[str]) -> int:
        """The class index of ``record``: ``.cls`` an index, ``.txt`` a class name, ``.json`` either."""
        ext = next((e for e in extensions if e in record), None)
        if ext is None:
            raise DataError(f"{where} has no label: add KEY.{' or KEY.'.join(extensions)}, or drop the sample")
        text = text_of(where, record[ext]).strip()
        value: Any = text
        if ext == "json":
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):  # nested too deep for the parser, too
                raise DataError(f"{where}: KEY.json is not JSON; write the class name or index") from None
            value = value.get("label") if isinstance(value, dict) else value
        if ext == "cls" or isinstance(value, int):
            # digits bounded before they are converted (Python's own limit names no shard)
            index = value if isinstance(value, int) else class_index(text, MAX_CLASS_INDEX)  # type: ignore[assignment]
            if index is None or isinstance(index, bool):
                raise DataError(f"{where}: KEY.{ext} holds {text[:40]!r}, not a class index 0, 1, ...")
        else:
            index = self.index.get(str(value), -1)
            if index < 0:
                raise DataError(f"{where}: class {str(value)[:60]!r} is not among the shards' classes {self.classes}")
        if not 0 <= index < len(self.classes):
            raise DataError(f"{where}: class index {index}; the shards have classes 0 to {len(self.classes) - 1}")
        return index


def _array(where: str, data: bytes) -> torch.Tensor:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise DataError(f"{where}: KEY.npy is not a readable .npy array ({error})") from None
    if array.dtype.kind not in "biuf":
        raise DataError(f"{where}: KEY.npy holds {array.dtype} values; expected numbers")
    return torch.from_numpy(np.ascontiguousarray(array))


class ShardStream(IterableDataset):
    """The samples of ``shards`` (each with its count), decoded by ``decode``; ``len`` is their
    number. Read through a DataLoader made by `zoo.training.loop.loaders.build_loader`, which
    binds it to the Trainer's sampler (`bind_sampler`); read directly, it yields every sample
    in shard order."""

    def __init__(
        self,
        shards: Sequence[Shard],
        decode: Callable[[Record], Any],
        *,
        buffer: int = SHUFFLE_BUFFER,
        skip_bad: bool = False,
        keep: frozenset[str] | None = None,
    ) -> None:
        problem = BUFFER.problem(buffer)
        if problem:
            raise InvalidArgumentError(f"ShardStream buffer {problem}, got {buffer!r}")
        if any(shard.samples is None for shard in shards):
            raise InvalidArgumentError("ShardStream needs each shard's sample count (from its manifest, or a scan)")
        self.shards, self.decode, self.buffer, self.skip_bad = list(shards), decode, buffer, skip_bad
        self.keep = keep if keep is not None else getattr(decode, "keep", None)
        self.counts = [int(shard.samples or 0) for shard in self.shards]

    def __len__(self) -> int:
        return sum(self.counts)

    def __iter__(self) -> Iterator[Any]:
        return _BoundStream(self, None, 1).__iter__()

    def bind_sampler(self, sampler: Any, batch_size: int) -> _BoundStream:
        """This process's view of the stream for a DataLoader of ``batch_size``: the epoch, rank,
        shuffle and position of ``sampler`` (an `EpochSampler` or `ShardSampler`), read when
        iteration starts."""
        return _BoundStream(self, sampler, batch_size)

    def records(self, segments: list[tuple[int, int, int]]) -> Iterator[Record]:
        """The raw samples ``first:last`` of each (shard index, first, last) segment, in order."""
        for index, first, last in segments:
            yield from self._shard_records(self.shards[index], first, last)

    def _shard_records(self, shard: Shard, first: int, last: int) -> Iterator[Record]:
        position, extra = 0, None
        try:
            for record in read_samples(shard, self.keep):
                if position >= last:  # past the segment; past the counted samples, a sample the manifest lacks
                    extra = record["__key__"] if position >= int(shard.samples or 0) else None
                    break
                if position >= first:
                    record["__shard__"] = shard.url
                    yield record
                position += 1
        except DataError as error:
            if not self.skip_bad:
                raise
            bad = {"__bad__": str(error), "__shard__": shard.url, "__key__": "?"}
            for _ in range(max(position, first), min(last, int(shard.samples or 0))):
                yield dict(bad)
        if extra is not None:  # never read to its end, so never verified: refused, --skip-bad-rows or not
            raise DataError(
                f"shard {shard.url} holds more samples than the {shard.samples} its manifest counts (sample "
                f"{extra!r} follows them: appended to the tar?); rewrite it (and its manifest) with `zoo shards`"
            )


class _BoundStream(IterableDataset):
    """A `ShardStream` as one process (and, inside, one DataLoader worker) reads it."""

    def __init__(self, stream: ShardStream, sampler: Any, batch_size: int) -> None:
        self.stream, self.sampler, self.batch_size = stream, sampler, batch_size

    def __len__(self) -> int:
        return len(self.sampler) if self.sampler is not None else len(self.stream)

    def __iter__(self) -> Iterator[Any]:
        segments, shuffle, pad, seed = plan(self.stream.counts, self.sampler)
        records: Iterator[Record] = self.stream.records(segments)
        if shuffle and self.stream.buffer > 1:
            records = shuffled(records, self.stream.buffer, random.Random(seed))
        if pad:
            records = _padded(records, pad)
        skip = getattr(self.sampler, "skip", 0)
        records = itertools.islice(records, skip, None)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        own = (r for i, r in enumerate(records) if (i // self.batch_size) % workers == worker)
        samples = _decoded(own, self.stream.decode, self.stream.skip_bad)
        return samples if info is None else _from_worker(samples)


def _from_worker(samples: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from samples
    except DataError as error:
        raise WorkerDataError(str(error)) from None


def plan(counts: Sequence[int], sampler: Any) -> tuple[list[tuple[int, int, int]], bool, int, str]:
    """This process's share of one pass: (segments of (shard, first, last), whether to shuffle,
    samples to pad with the last one, the shuffle seed). An `EpochSampler` (training): the
    shards in the epoch's seeded order, a contiguous run of ``num_samples`` per rank, wrapping
    around; a `ShardSampler` (evaluation): shard order, runs as long as its ``num_valid``, padded
    to its length; no sampler: everything in order."""
    total = sum(counts)
    if isinstance(sampler, EpochSampler):
        order = list(range(len(counts)))
        if sampler.shuffle:
            order = torch.randperm(len(counts), generator=torch.Generator().manual_seed(sampler.seed + sampler.epoch))
            order = order.tolist()
        start = sampler.rank * sampler.num_samples
        segments = _segments(counts, order, start, start + sampler.num_samples)
        return segments, sampler.shuffle, 0, f"{sampler.seed}/{sampler.epoch}/{sampler.rank}"
    if isinstance(sampler, ShardSampler):
        world, rank = sampler.num_replicas, sampler.rank
        start = sum(math.ceil((total - q) / world) for q in range(rank))
        segments = _segments(counts, list(range(len(counts))), start, start + sampler.num_valid)
        return segments, False, len(sampler) - sampler.num_valid, ""
    return _segments(counts, list(range(len(counts))), 0, total), False, 0, ""


def _segments(counts: Sequence[int], order: Sequence[int], start: int, stop: int) -> list[tuple[int, int, int]]:
    """Positions ``start:stop`` of the shards concatenated in ``order`` (past the end: from the
    start again) as (shard index, first, last) segments."""
    total = sum(counts)
    segments: list[tuple[int, int, int]] = []
    while start < stop and total:
        offset = 0
        for index in order:
            lo, hi = max(start, offset), min(stop, offset + counts[index])
            if lo < hi:
                segments.append((index, lo - offset, hi - offset))
            offset += counts[index]
        start, stop = max(start, total) - total, stop - total
    return segments


def shuffled(records: Iterator[Record], size: int, rng: random.Random) -> Iterator[Record]:
    """``records`` shuffled through a buffer of ``size``: memory is the buffer, not the data."""
    buffer: list[Record] = []
    for record in records:
        if len(buffer) < size:
            buffer.append(record)
            continue
        index = rng.randrange(size)
        yield buffer[index]
        buffer[index] = record
    rng.shuffle(buffer)
    yield from buffer


def _padded(records: Iterator[Record], pad: int) -> Iterator[Record]:
    """``records`` then ``pad`` repeats of the last one (evaluation shards of equal length)."""
    last = None
    for last in records:
        yield last
    if last is not None:
        yield from itertools.repeat(last, pad)


def _decoded(records: Iterator[Record], decode: Callable[[Record], Any], skip_bad: bool) -> Iterator[Any]:
    """Decoded samples; with ``skip_bad`` a bad one is replaced by the good one before it (or
    after it, at the start), and counted in one warning at the end."""
    previous, pending, bad, first = None, 0, 0, ""
    for record in records:
        try:
            if "__bad__" in record:
                raise DataError(record["__bad__"])
            sample = decode(record)
        except DataError as error:
            if not skip_bad:
                raise
            bad, first = bad + 1, first or str(error)
            if previous is None:
                pending += 1
                continue
            sample = previous
        previous = sample
        for _ in range(pending + 1):
            yield sample
        pending = 0
    if bad:
        if previous is None:
            raise DataError(f"every sample of this process's shards is bad; the first: {first}")
        log.warning("shards: %d bad samples skipped (each replaced by a good one); the first: %s", bad, first)


# ---------------------------------------------------------------------------------------------
# Shards as a DataSource


@dataclass
class ShardSource(DataSource):
    """Shards described from their manifest (or, local and without one, a scan): `split` holds
    out whole shards for validation (``round(val_fraction * shards)``, at least one), the last
    ones unless others cover more classes (`zoo.training.data.shard_holdout`)."""

    shards: list[Shard] = field(default_factory=list)
    decoder: SampleDecoder | None = None
    skip_bad: bool = False
    buffer: int = SHUFFLE_BUFFER

    def split(
        self,
        val_fraction: float = 0.1,
        seed: int = 0,
        train_transform: Callable[[Any], Any] | None = None,
        eval_transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
    ) -> tuple[ShardStream, ShardStream | None]:
        if not 0.0 <= val_fraction < 1.0:
            raise InvalidArgumentError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if limit is not None:
            raise InvalidArgumentError(
                f"{self.description}: --limit takes the first samples of a file; with shards, name fewer shards "
                "with the brace range instead"
            )
        held = max(1, round(val_fraction * len(self.shards))) if val_fraction > 0 else 0
        if held >= len(self.shards):
            raise DataError(
                f"{self.description}: the validation hold-out takes whole shards, and {len(self.shards)} shard(s) "
                "leave none to train on; write more shards (zoo shards --shard-size), pass --val-data, "
                "or --val-fraction 0"
            )
        out = hold_out(self.description, self.shards, held, self.class_names or [])
        self.split_note = out.note
        train = self._stream([s for i, s in enumerate(self.shards) if i not in out.held], train_transform)
        val = self._stream([self.shards[i] for i in out.held], eval_transform) if held else None
        return train, val

    def full(self, transform: Callable[[Any], Any] | None = None) -> ShardStream:
        return self._stream(self.shards, transform)

    def _stream(self, shards: list[Shard], transform: Callable[[Any], Any] | None) -> ShardStream:
        decoder = self.decoder.with_transform(transform if self.kind == "images" else None)  # type: ignore[union-attr]
        return ShardStream(shards, decoder, buffer=self.buffer, skip_bad=self.skip_bad)


def shard_source(
    spec: str, *, max_length: int = 512, skip_bad: bool = False, buffer: int = SHUFFLE_BUFFER
) -> ShardSource:
    """The shards ``spec`` names (see `zoo.training.data.shards.shard_files.expand_spec`) as a
    `DataSource`; described by their manifest, which every run verifies them against as it reads
    them, or (local shards without one) by a scan that counts their samples and labels."""
    urls = expand_spec(spec)
    info, shards = _described(spec, urls)
    kind, classes = info["kind"], info["classes"]
    counts = info.get("class_counts")
    class_counts = dict(zip(classes, counts)) if isinstance(counts, list) and len(counts) == len(classes) else None
    size = info.get("image_size")
    total = sum(int(shard.samples or 0) for shard in shards)
    return ShardSource(
        kind=kind,
        description=f"shards {spec} ({len(shards)} shards, {total} samples, {len(classes)} classes)",
        num_samples=total,
        num_classes=len(classes),
        class_names=list(classes),
        make_subset=_no_subsets,
        in_chans=info.get("channels") if kind == "images" else None,
        image_size=tuple(size) if kind == "images" and size else None,
        collate_fn=TextBatches(max_length) if kind == "text" else None,
        class_counts=class_counts,
        shards=shards,
        decoder=SampleDecoder(kind, classes, info.get("channels") if kind == "images" else None),
        skip_bad=skip_bad,
        buffer=buffer,
    )


def _no_subsets(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Any:
    raise InvalidArgumentError("shards are streamed, not indexed: use ShardSource.split or full")  # internal: API


def _described(spec: str, urls: list[str]) -> tuple[dict[str, Any], list[Shard]]:
    """The manifest fields of the shards (kind, classes, channels, image size) and each shard
    with its count and sha256, from the manifests beside them (or a scan of local shards)."""
    folders = list(dict.fromkeys(manifest_location(url) for url in urls))
    manifests = [read_manifest(location) for location in folders]
    if all(m is None for m in manifests) and not any(is_url(url) for url in urls):
        return scan_shards(urls)
    entries: dict[str, Shard] = {}
    first = None
    for location, manifest in zip(folders, manifests):
        if manifest is None:
            raise DataError(
                f"{location} does not exist: shards read from a URL (or mixed with others that have one) need "
                "the manifest.json that `zoo shards` writes beside them"
            )
        first = first or manifest
        if (manifest["kind"], manifest["classes"]) != (first["kind"], first["classes"]):
            raise DataError(f"{location}: its kind or classes differ from those of {folders[0]}; use one data set")
        base = location[: -len(MANIFEST)]
        for entry in manifest["shards"]:
            counts = tuple(entry["class_counts"]) if entry.get("class_counts") else None
            entries[base + entry["name"]] = Shard(base + entry["name"], entry["samples"], entry["sha256"], counts)
    missing = [url for url in urls if url not in entries]
    if missing:
        raise DataError(
            f"shard {missing[0]} is not in {manifest_location(missing[0])}; rewrite the manifest with `zoo shards`"
        )
    # the sampler is sized by the counts before any read: past `CHECKED_EPOCH` samples, a count no
    # local shard's bytes can hold is refused here (below it, reading finds a short shard, by sample)
    claimed = sum(int(entries[url].samples or 0) for url in urls)
    for url in urls if claimed > CHECKED_EPOCH else ():
        size = None if is_url(url) else os.path.getsize(url)
        if size is not None and int(entries[url].samples or 0) * MIN_SAMPLE_BYTES > size:
            raise DataError(
                f"{manifest_location(url)}: {entries[url].name} counts {entries[url].samples:,} samples, more than its "
                f"{size:,} bytes can hold; rewrite the shards and their manifest with `zoo shards`"
            )
    return first, [entries[url] for url in urls]  # type: ignore[return-value]
