"""Samples per second read for training from WebDataset shards against an image folder holding
the same images, through the loaders the Trainer builds (`zoo.training.loop.loaders.build_loader`:
an `EpochSampler` epoch, images decoded by zoo's one image reader and turned into tensors), and
with 1 against 2 processes on this machine (each process its half of the epoch, as under torchrun,
without DataLoader workers).

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
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from zoo.training.data.kinds import open_data
from zoo.training.data.shard_writer import write_shards
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


def _process(results: Any, start: Any, *args: Any) -> None:
    results.put(epoch(*args, start=start))


def rate(data: str, world: int, workers: int, batch_size: int) -> float:
    """Samples/s of one epoch read by ``world`` processes at once (each its share; the slowest
    one's reading time, from a common start, counts)."""
    if world == 1:
        samples, seconds = epoch(data, 0, 1, workers, batch_size)
        return samples / seconds
    context = multiprocessing.get_context("spawn")
    results, start = context.Queue(), context.Barrier(world)
    processes = [
        context.Process(target=_process, args=(results, start, data, rank, world, workers, batch_size))
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
        sources = {"image folder": str(folder), "shards": str(Path(tmp) / "shards")}
        print(f"{'data':<14} {'processes':>9} {'workers':>7} {'samples/s':>10}")
        for world in (1, 2):
            # 2 processes read without workers: on 2 cores, 2 x 2 DataLoader workers measured the
            # machine's oversubscription (both sources under 100 samples/s), not the data
            for workers in args.workers if world == 1 else [0]:
                rows = {name: [] for name in sources}
                for _ in range(args.repeats):
                    for name, data in sources.items():  # in turn, so both see the same machine
                        rows[name].append(rate(data, world, workers, args.batch_size))
                for name, rates in rows.items():
                    print(f"{name:<14} {world:>9} {workers:>7} {statistics.median(rates):>10.0f}")


if __name__ == "__main__":
    main()
