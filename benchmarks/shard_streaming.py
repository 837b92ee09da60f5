"""Samples per second read for training from WebDataset shards against an image folder holding
the same images, through the loaders the Trainer builds (`zoo.training.loop.loaders.build_loader`:
an `EpochSampler` epoch, images decoded by zoo's one image reader and turned into tensors), and
with 1 against 2 processes on this machine (each process its half of the epoch, as under torchrun,
without DataLoader workers).

WebDataset's own loader reads the same shards as a peer column, side by side in the same run:
``wds.WebDataset(urls, shardshuffle=False, nodesplitter=...)``, ``.decode("pil")``,
``.to_tuple("jpg", "cls")``, the same ``pil_to_tensor``, through a DataLoader of the same batch
size and workers (its processes split the shards, zoo's the samples; it does not shuffle
samples here, zoo's stream shuffles them through its buffer). ``zoo/wds`` is the ratio.

The images are written once to a temporary folder (JPEG, RGB, ``--size`` px, random content so
their bytes do not compress), then `zoo shards` writes them to shards of ``--shard-size``. Each
variant reads whole epochs, in turn, ``--repeats`` times; the table gives the median samples/s.
The page cache is warm for both (what a second epoch sees); shards read sequentially, the folder
opens one file per sample, so cold storage (a network filesystem, object storage) favours shards
more than this table shows.

    .venv/bin/python benchmarks/shard_streaming.py [--images 4000] [--size 64] [--workers 0 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms.functional import pil_to_tensor

from zoo.training.data.kinds import open_data
from zoo.training.data.shards.shard_files import expand_spec
from zoo.training.data.shards.shard_writer import write_shards
from zoo.training.loop.loaders import EpochSampler, build_loader


def write_images(root: Path, count: int, size: int) -> Path:
    """``count`` random RGB JPEGs in 10 class folders."""
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = root / f"class{index % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index:06d}.jpg", quality=90)
    return root


def epoch(data: str, rank: int, world: int, workers: int, batch_size: int, start: Any = None) -> tuple[int, float]:
    """One epoch of this rank's share of ``data``: (samples, seconds); with ``start`` (a barrier)
    the processes of one measurement begin reading together."""
    torch.set_num_threads(1)
    train, _ = open_data(data).split(0.0, train_transform=pil_to_tensor)
    sampler = EpochSampler(train, num_replicas=world, rank=rank, seed=0)
    sampler.set_epoch(1)
    loader = build_loader(train, batch_size, sampler=sampler, num_workers=workers)
    if start is not None:
        start.wait()
    began = time.perf_counter()
    samples = sum(len(batch[1]) for batch in loader)
    return samples, time.perf_counter() - began


def _node_shards(rank: int, world: int, urls: list[str]) -> list[str]:
    """WebDataset's nodesplitter for ``world`` processes without a process group: every
    ``world``-th shard (`wds.split_by_node` reads torch.distributed's rank)."""
    return list(urls)[rank::world]


def wds_epoch(data: str, rank: int, world: int, workers: int, batch_size: int, start: Any = None) -> tuple[int, float]:
    """`epoch` with WebDataset's loader on the same shards: (samples, seconds)."""
    torch.set_num_threads(1)
    dataset = (
        wds.WebDataset(expand_spec(data), shardshuffle=False, nodesplitter=functools.partial(_node_shards, rank, world))
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(pil_to_tensor, None)
    )
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    if start is not None:
        start.wait()
    began = time.perf_counter()
    samples = sum(len(batch[1]) for batch in loader)
    return samples, time.perf_counter() - began


READERS = {"zoo": epoch, "wds": wds_epoch}


def _process(results: Any, start: Any, reader: str, *args: Any) -> None:
    results.put(READERS[reader](*args, start=start))


def rate(data: str, world: int, workers: int, batch_size: int, reader: str = "zoo") -> float:
    """Samples/s of one epoch read by ``world`` processes at once (each its share; the slowest
    one's reading time, from a common start, counts)."""
    if world == 1:
        samples, seconds = READERS[reader](data, 0, 1, workers, batch_size)
        return samples / seconds
    context = multiprocessing.get_context("spawn")
    results, start = context.Queue(), context.Barrier(world)
    processes = [
        context.Process(target=_process, args=(results, start, reader, data, rank, world, workers, batch_size))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    done = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    return sum(samples for samples, _ in done) / max(seconds for _, seconds in done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--shard-size", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zoo-shards-bench-") as tmp:
        folder = write_images(Path(tmp) / "images", args.images, args.size)
        write_shards(folder, Path(tmp) / "shards", shard_size=args.shard_size)
        shard_bytes = sum(p.stat().st_size for p in (Path(tmp) / "shards").glob("*.tar"))
        print(
            f"{args.images} JPEGs {args.size}x{args.size}, {shard_bytes / 2**20:.1f} MiB of shards; median of {args.repeats}"
        )
        sources = {
            "image folder": (str(folder), "zoo"),
            "shards": (str(Path(tmp) / "shards"), "zoo"),
            "shards (wds)": (str(Path(tmp) / "shards"), "wds"),
        }
        print(f"{'data':<14} {'processes':>9} {'workers':>7} {'samples/s':>10} {'zoo/wds':>7}")
        for world in (1, 2):
            # 2 processes read without workers: on 2 cores, 2 x 2 DataLoader workers measured the
            # machine's oversubscription (both sources under 100 samples/s), not the data
            for workers in args.workers if world == 1 else [0]:
                rows: dict[str, list[float]] = {name: [] for name in sources}
                for _ in range(args.repeats):
                    for name, (data, reader) in sources.items():  # in turn, so all see the same machine
                        rows[name].append(rate(data, world, workers, args.batch_size, reader))
                medians = {name: statistics.median(rates) for name, rates in rows.items()}
                ratio = f"{medians['shards'] / medians['shards (wds)']:.2f}"
                for name, median in medians.items():
                    shown = ratio if name == "shards" else ""
                    print(f"{name:<14} {world:>9} {workers:>7} {median:>10.0f} {shown:>7}")
    print(machine())


def machine() -> str:
    """The machine in one line: CPU, cores, torch and webdataset versions, load average."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return (
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"webdataset {wds.__version__}; load average {load} (1, 5, 15 min) after the run"
    )


if __name__ == "__main__":
    main()
