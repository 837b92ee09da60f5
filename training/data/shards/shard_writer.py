"""``zoo shards DATA --out DIR``: WebDataset tar shards from any data zoo reads (an image folder,
a ``.csv``/``.jsonl`` of text rows, a tensor file), written by webdataset's `TarWriter`, with the
`MANIFEST` a run verifies them against: each shard's sample count and sha256, the data's kind,
classes, class counts, channels and image size.

Images from a folder keep their file's bytes (``KEY.png``/``.jpg``/``.webp``; other formats become
PNG); uint8 image tensors become PNG; feature tensors ``KEY.npy``; text rows ``KEY.txt``; the label
of each is ``KEY.cls`` (its class index). Shards are reproducible: the same data gives the same
bytes (fixed member times and owners).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from zoo.bounds import SEED, count
from zoo.errors import DataError, InvalidArgumentError, ZooError
from zoo.store.files import atomic_files, atomic_path, write_json
from zoo.training.data.kinds import DataSource, open_data
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.data.shards.shard_files import IMAGE_EXTENSIONS, MANIFEST, MANIFEST_FORMAT
from zoo.training.data.shards.shard_source import ShardSource
from zoo.training.data.source import check_class_names

SHARD_SIZE = count(1, 10_000_000)  # samples per shard
DEFAULT_SHARD_SIZE = 1000
_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_shard_options(shard_size: int, prefix: str) -> None:
    """Refuse a shard size out of bounds or a prefix that is not a plain name."""
    problem = SHARD_SIZE.problem(shard_size)
    if problem:
        raise InvalidArgumentError(f"shard_size (--shard-size) {problem}, got {shard_size!r}")
    if not _PREFIX.fullmatch(prefix):
        raise InvalidArgumentError(f"--prefix {prefix!r}: use 1 to 64 letters, digits, '-' or '_'")


def write_shards(
    data: str | os.PathLike | DataSource,
    out: str | os.PathLike,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    prefix: str = "train",
    max_length: int = 512,
    seed: int | None = 0,
    label_field: str | None = None,
) -> Path:
    """Write ``data`` (a path `open_data` reads, or a `DataSource`) to ``out`` as shards of
    ``shard_size`` samples named ``PREFIX-000000.tar`` ..., then their manifest; returns the
    manifest's path. ``label_field`` names the label's column of an image list or text rows
    with several (zoo finetune's ``--label-field``). The samples are shuffled across the shards
    in an order ``seed`` fixes (recorded in the manifest; None keeps the data's order), so that
    every shard, and a hold-out of whole shards, holds every class. ``out`` must be missing or
    empty; the shards appear there all at once, at the end (a run stopped on the way leaves none)."""
    _check_shard_options(shard_size, prefix)
    _tar_writer()  # before reading the data: a missing extra is said first
    if not isinstance(data, DataSource):  # --out names no input: checked before the data is read
        _check_not_the_data(Path(out), Path(data).expanduser())
    reading = MoleculeOptions(label_field=label_field)
    source = data if isinstance(data, DataSource) else open_data(data, max_length=max_length, molecules=reading)
    _check_classes(source)
    classes = list(source.class_names or [str(i) for i in range(source.num_classes)])
    check_class_names(source.description, classes, "the class names")  # as a manifest's are read back
    out = _checked_out(Path(out))
    # written into a hidden staging folder inside ``out`` and moved out at the end, the manifest
    # last: a run stopped on the way (Ctrl-C, an unreadable sample) leaves no shards behind
    with atomic_files(out, last=[MANIFEST]) as staging:
        entries, counts, pending, index = [], [0] * source.num_classes, [], 0
        for sample, label in _encoded(source, seed):
            counts[label] += 1
            pending.append({"__key__": f"{index:09d}", **sample, "cls": str(label).encode()})
            index += 1
            if len(pending) == shard_size:
                entries.append(_write_shard(staging / f"{prefix}-{len(entries):06d}.tar", pending, len(classes)))
                pending = []
        if pending:
            entries.append(_write_shard(staging / f"{prefix}-{len(entries):06d}.tar", pending, len(classes)))
        kind = "text" if source.kind == "text" else "images" if source.kind == "images" else "tensors"
        manifest = {
            "format": MANIFEST_FORMAT,
            "kind": kind,
            "classes": classes,
            "class_counts": counts,
            "channels": source.in_chans if kind == "images" else None,
            "image_size": list(source.image_size) if kind == "images" and source.image_size else None,
            "source": source.description,
            "shuffle_seed": seed,  # the samples' order across shards (None: the data's own)
            "shards": entries,
        }
        write_json(manifest, staging / MANIFEST)
    return out / MANIFEST


def _check_classes(source: DataSource) -> None:
    """Refuse data shards cannot hold: shards already, graphs, other channels than PNG's, or
    labels that are not one class per sample (multi-label, regression)."""
    if isinstance(source, ShardSource):
        raise DataError(
            f"{source.description}: these are shards already; zoo shards writes shards from an image folder, text "
            "rows or a tensor file, and zoo finetune trains on these as they are (--data with the same path)"
        )
    if source.kind == "graphs" or source.num_classes is None:
        raise DataError(f"{source.description}: shards hold labelled images, tensors or text rows, not {source.kind}")
    if source.multi_label or source.target is not None:
        task = "multi-label" if source.multi_label else "a regression"
        raise DataError(
            f"{source.description}: shards hold one class per sample, and this data is {task}; name a column "
            "of classes with --label-field, or train on the data itself (zoo finetune --data)"
        )
    if source.kind == "images" and source.in_chans not in (1, 3, 4):  # PNG's gray, RGB and RGBA
        raise DataError(
            f"{source.description}: images of {source.in_chans} channels; shards hold images of 1, 3 or 4 channels "
            "(gray, RGB, RGBA)"
        )


def _check_not_the_data(out: Path, data: Path) -> None:
    """Refuse an ``out`` that is the data, or holds it (a folder the data is in), by any path."""
    if out.exists() and data.exists() and (data.resolve().is_relative_to(out.resolve()) or out.samefile(data)):
        raise InvalidArgumentError(
            f"--out {out} is an input of this command (the data {data}): writing there would mix the shards "
            "into it; choose a new folder"
        )


def _checked_out(out: Path) -> Path:
    """``out``, refused unless missing or an empty folder (naming what a killed run left there)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        left = sorted(p.name for p in out.iterdir() if p.name.startswith(".staging-")) if out.is_dir() else []
        if left and len(left) == len(list(out.iterdir())):  # what atomic_files leaves when a run is killed
            raise InvalidArgumentError(
                f"--out {out} holds only {', '.join(left)}, left by a zoo shards run that was killed "
                "(or is still writing): once no such run is left, delete it, or choose a new folder"
            )
        raise InvalidArgumentError(f"--out {out} is not an empty folder; choose a new one")
    return out


def _encoded(source: DataSource, seed: int | None) -> Iterator[tuple[dict[str, bytes], int]]:
    """Each sample of ``source`` as the files of a WebDataset sample (without its label) and its
    label, in an order ``seed`` shuffles (None: the data's order)."""
    dataset: Any = source.full()
    order = range(len(dataset))
    if seed is not None:
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    files = getattr(dataset, "samples", None)  # an image folder: (path, label) pairs, copied as they are
    if source.kind == "images" and isinstance(files, list):
        for position in order:
            path, label = files[position]
            ext = Path(path).suffix.lower().lstrip(".")
            if ext in IMAGE_EXTENSIONS:
                yield {ext: Path(path).read_bytes()}, int(label)
            else:
                yield {"png": _png(dataset[position][0])}, int(label)
        return
    for index in order:
        sample, label = dataset[index]
        label = int(label)
        if source.kind == "text":
            yield {"txt": str(sample).encode("utf-8")}, label
        elif source.kind == "images":
            yield {"png": _png(sample)}, label
        else:
            buffer = io.BytesIO()
            np.save(buffer, torch.as_tensor(sample).numpy(), allow_pickle=False)
            yield {"npy": buffer.getvalue()}, label


def _png(image: Any) -> bytes:
    """A PIL image or a uint8 [C, H, W] tensor as PNG bytes."""
    if isinstance(image, torch.Tensor):
        array = image.numpy()
        image = Image.fromarray(array[0] if array.shape[0] == 1 else np.moveaxis(array, 0, -1))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _tar_writer() -> Any:
    """webdataset's `TarWriter`, or a `ZooError` naming the extra that installs it."""
    try:
        from webdataset.writer import TarWriter
    except ImportError:
        raise ZooError("zoo shards writes with webdataset, which is not installed: pip install 'zoo[shards]'") from None
    return TarWriter


def _write_shard(path: Path, samples: list[dict[str, bytes]], num_classes: int) -> dict[str, Any]:
    """One shard, written atomically; its manifest entry (name, samples, bytes, sha256, samples
    of each class)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as stream:
            writer = _tar_writer()(stream, encoder=False, mtime=0, user="zoo", group="zoo")
            try:
                for sample in samples:
                    writer.write(sample)
            finally:  # also when stopped: a tar stream left open writes to its closed file when collected
                writer.close()
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(2**20):
            digest.update(chunk)
    counts = np.bincount([int(sample["cls"]) for sample in samples], minlength=num_classes).tolist()
    entry = {"name": path.name, "samples": len(samples), "bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    return entry | {"class_counts": counts}


# ---------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``zoo shards``."""
    parser.add_argument("data", help="an image folder, a .csv/.jsonl of text,label rows, or a .pt/.npz tensor file")
    parser.add_argument("--out", required=True, help="an empty or new folder for the shards and manifest.json")
    parser.add_argument(
        "--shard-size",
        type=SHARD_SIZE.parse,
        default=DEFAULT_SHARD_SIZE,
        help=f"samples per shard (default: {DEFAULT_SHARD_SIZE})",
    )
    parser.add_argument("--prefix", default="train", help="shard names: PREFIX-000000.tar, ... (default: train)")
    parser.add_argument(
        "--label-field", help="the label's column (image lists, text rows: when there are several), as zoo finetune's"
    )
    parser.add_argument(
        "--seed",
        type=SEED.parse,
        default=0,
        help="the seed of the samples' shuffle across shards, recorded in the manifest (default: 0)",
    )
    parser.add_argument(
        "--no-shuffle",
        dest="shuffle",
        action="store_false",
        help="keep the data's order (class by class for a folder: a hold-out of whole shards then lacks classes)",
    )
