"""``zoo shards``: WebDataset shards and their manifest written by
`zoo.training.data.shards.shard_writer` into a new or empty ``--out`` folder (never the data's)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def run_shards(args: argparse.Namespace) -> int:
    """``zoo shards``: write the shards and their manifest, and say how to train on them."""
    from zoo.training.data.shards.shard_writer import write_shards

    seed = args.seed if args.shuffle else None
    manifest = write_shards(
        args.data, args.out, shard_size=args.shard_size, prefix=args.prefix, seed=seed, label_field=args.label_field
    )
    shards = json.loads(manifest.read_text())["shards"]
    total = sum(entry["samples"] for entry in shards)
    spec = Path(args.out) / f"{args.prefix}-{{000000..{len(shards) - 1:06d}}}.tar"
    order = f"shuffled with seed {seed}" if seed is not None else "in the data's order"
    print(f"wrote {len(shards)} shards ({total} samples, {order}) and {manifest}; train with --data '{spec}'")
    return 0
