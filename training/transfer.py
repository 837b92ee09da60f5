"""Transfer learning against training from scratch: fine-tune NAME's pretrained weights and
the same architecture from random weights on the same data, with the same budget and seed,
and plot both runs' validation curves.

    python -m zoo.training.transfer resnet18.tv_in1k --data my_images/ --out runs/transfer --epochs 5
    python -m zoo.training.transfer my_saved_model/ --data fashion-mnist --limit 1000 --out runs/t

OUT gets ``pretrained/`` and ``scratch/`` (each a full `zoo finetune` output), ``transfer.png``
and ``transfer.json``. Takes every ``zoo finetune`` option; the scratch run always trains
the whole network (``--mode full``, no layer decay), since random features are not worth
probing.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.errors import InvalidArgumentError
from zoo.loading.resolve import Registered, resolve
from zoo.store.files import write_json
from zoo.training.finetune import FinetuneResult, module_main, run
from zoo.training.finetune.run_folder import Output, prepare
from zoo.training.loop.records.curves import plot_curves

CURVES = ("train_loss", "val_loss", "train_acc", "val_acc")
# the comparison's own files; each arm's folder is a finetune run with its own manifest
TRANSFER_OUTPUTS = (Output("transfer.png"), Output("transfer.json"))


def compare(args: argparse.Namespace, command: str | None = None) -> dict[str, Any]:
    """Run both arms and write the comparison; returns the summary written to transfer.json."""
    if args.scratch:
        raise InvalidArgumentError("transfer runs the scratch arm itself; drop --scratch")
    source = resolve(args.name)  # what the name means, checked before either arm trains
    if isinstance(source, Registered):
        arch, entry = source.arch, source.entry
        if entry is None or "." not in args.name:
            raise InvalidArgumentError(
                f"transfer compares pretrained weights with random ones: name weights (e.g. {arch}.<tag>, see "
                f"`zoo list '{arch}*' --pretrained`) or a directory written by zoo.save, "
                f"not the bare architecture {args.name!r}"
            )
    out = Path(args.out)
    with prepare(out, TRANSFER_OUTPUTS, args.resume, args.overwrite).sealing():
        return _compare(args, out, command)


def _compare(args: argparse.Namespace, out: Path, command: str | None) -> dict[str, Any]:
    """Both arms into ``out`` (checked and claimed), then the plot, the summary and the table."""
    results: dict[str, FinetuneResult] = {}
    for arm in ("pretrained", "scratch"):
        arm_args = copy.copy(args)
        arm_args.out = str(out / arm)
        if arm == "scratch":
            arm_args.scratch, arm_args.mode, arm_args.layer_decay = True, "full", None
        print(f"== {arm} ==")
        results[arm] = run(arm_args, command=command)
    epochs = sorted({row["epoch"] for r in results.values() for row in r.history})
    rows = [{"epoch": epoch} for epoch in epochs]
    for arm, r in results.items():  # one row per epoch, both runs' curves side by side
        for row in r.history:
            merged = rows[epochs.index(row["epoch"])]
            merged |= {f"{arm} {k}": v for k, v in row.items() if k in CURVES}
    plot_curves(rows, out / "transfer.png")
    summary = {
        "name": args.name,
        "data": str(args.data),
        "command": command,
        "runs": {
            arm: {"mode": "full" if arm == "scratch" else args.mode, "best": r.metrics, "history": r.history}
            for arm, r in results.items()
        },
    }
    write_json(summary, out / "transfer.json")
    keys = [k for k in ("val_acc", "val_loss", "train_loss") if any(k in r.metrics for r in results.values())]
    print(f"{'run':<12}" + "".join(f"{k:>12}" for k in keys) + f"{'best epoch':>12}")
    for arm, r in results.items():
        values = "".join(f"{r.metrics.get(k, float('nan')):>12.4f}" for k in keys)
        print(f"{arm:<12}{values}{r.metrics.get('epoch')!s:>12}")
    print(f"plot: {out / 'transfer.png'}")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.training.transfer``: the options of ``zoo finetune``, both arms."""
    return module_main("zoo.training.transfer", __doc__, compare, argv)


if __name__ == "__main__":
    sys.exit(main())
