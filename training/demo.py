"""The main job, ``zoo demo``: transfer learning in a few minutes on 2 CPU cores, offline.

scikit-learn's handwritten digits (1797 real 8x8 scans, a domain the bundled model never saw)
are written out as image folders of 28x28 grayscale PNGs: a few labelled images per class
train, `VAL_PER_CLASS` others per class choose the best epoch, and the rest measure. The
bundled Fashion-MNIST ResNet-20 (``resnet20.fmnist``) is fine-tuned on them with ``zoo
finetune``'s defaults, and the same network is trained from random weights on the same images
with the same budget and seed (`zoo.training.transfer`). Both test accuracies are printed (the
test images chose nothing); the plot of both runs and the fine-tuned model
(``zoo.load(OUT/pretrained)``) are saved.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from zoo.bounds import SEED_MAX, WORKERS, Bounds, add_renamed, count
from zoo.devices import resolve_device
from zoo.errors import InvalidArgumentError
from zoo.training import finetune, transfer
from zoo.training.finetune.run_folder import Output, prepare
from zoo.training.loop.train_config import TrainConfig

DEFAULT_WEIGHTS = "resnet20.fmnist"
DEMO_OUTPUTS = (Output("digits", folder=True),)  # then transfer's files and the two arms' folders
SMALLEST_DIGIT = 174  # images of the rarest digit in scikit-learn's set
VAL_PER_CLASS = 20  # images per digit that choose the best epoch (never the test images)


def digit_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as 28x28 uint8 images (their 0..16 values scaled, bilinear) and labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255 / 16)).round().astype(np.uint8)
    images = np.stack([np.asarray(Image.fromarray(p, mode="L").resize((28, 28), Image.BILINEAR)) for p in pixels])
    return images, digits.target


def write_digits_folder(
    root: Path, per_class: int, test_per_class: int, seed: int = 0, val_per_class: int = 0
) -> tuple[Path, Path, Path]:
    """scikit-learn's digits as ``root/train/<digit>/*.png`` (``per_class`` images per digit),
    ``root/val/<digit>/*.png`` (``val_per_class`` others) and ``root/test/<digit>/*.png`` (up
    to ``test_per_class`` of the rest), 28x28 grayscale, chosen per class with ``seed``."""
    images, targets = digit_images()
    rng = np.random.default_rng(seed)
    folders = {split: root / split for split in ("train", "val", "test")}
    for label in range(10):
        indices = rng.permutation(np.flatnonzero(targets == label))
        if len(indices) <= per_class + val_per_class:
            raise InvalidArgumentError(
                f"digit {label} has {len(indices)} images: per_class + val_per_class must be below that"
            )
        ends = {
            "train": per_class,
            "val": per_class + val_per_class,
            "test": per_class + val_per_class + test_per_class,
        }
        start = 0
        for split, end in ends.items():
            folder = folders[split] / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            for index in indices[start:end]:
                Image.fromarray(images[index], mode="L").save(folder / f"{index:04d}.png")
            start = end
    return folders["train"], folders["val"], folders["test"]


def finetune_argv(args: argparse.Namespace, train_dir: Path, val_dir: Path) -> list[str]:
    """The ``zoo finetune`` options of both arms of the demo (`zoo.training.transfer.compare`):
    the defaults, with the demo's own epochs, learning rate, device and workers where given."""
    argv = [args.name, "--data", str(train_dir), "--val-data", str(val_dir), "--out", str(args.out)]
    argv += ["--seed", str(args.seed), "--no-post-training", "--overwrite"]  # overwrite: the demo's own folder
    if getattr(args, "device", None) is not None:
        argv += ["--device", args.device]
    if getattr(args, "num_workers", None) is not None:
        argv += ["--num-workers", str(args.num_workers)]
    if args.epochs is not None:
        argv += ["--epochs", str(args.epochs)]
    if args.lr is not None:
        argv += ["--lr", str(args.lr)]
    return argv


def run(args: argparse.Namespace, command: str | None = None) -> dict[str, Any]:
    """Write the digits folders, run both arms, score them on the test images and print it."""
    from zoo.training.scoring import score_file

    out = Path(args.out)
    args = copy.copy(args)  # both arms and the test on one device, checked before the digits are written
    args.device = str(resolve_device(getattr(args, "device", None)))
    loading = {"device": args.device, "num_workers": getattr(args, "num_workers", None) or 0, "progress": False}
    with prepare(out, DEMO_OUTPUTS, resume=False, overwrite=True).sealing():  # the last demo's digits go
        train_dir, val_dir, test_dir = write_digits_folder(
            out / "digits", args.per_class, args.eval_per_class, args.seed, VAL_PER_CLASS
        )
    parser = argparse.ArgumentParser()
    finetune.add_arguments(parser)
    tested = sum(1 for _ in test_dir.rglob("*.png"))
    print(
        f"digits: {args.per_class} labelled images per class in {train_dir}, {VAL_PER_CLASS} per class in "
        f"{val_dir} to choose the epoch, {tested} in {test_dir} to test"
    )
    summary = transfer.compare(parser.parse_args(finetune_argv(args, train_dir, val_dir)), command=command)
    tests = {arm: score_file(str(out / arm), str(test_dir), **loading)["accuracy"] for arm in summary["runs"]}
    for arm, accuracy in tests.items():
        summary["runs"][arm]["test_accuracy"] = accuracy
    print(
        f"\ntest accuracy on {tested} digits that chose nothing: fine-tuned from {args.name} "
        f"{tests['pretrained']:.1%}, from scratch {tests['scratch']:.1%} (same network, images, budget and seed; "
        "each at its best epoch on validation)"
    )
    print(f"fine-tuned model: {out / 'pretrained'} (zoo.load('{out / 'pretrained'}'))")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    name = parser.add_argument(
        "name", nargs="?", default=DEFAULT_WEIGHTS, help="weights to fine-tune (arch.tag or a zoo.save folder)"
    )
    add_renamed(parser, "--weights", name)  # the name is positional in every other command
    parser.add_argument("--out", default="runs/demo", help="output folder")
    per_class = count(1, SMALLEST_DIGIT - VAL_PER_CLASS - 1).parse  # one image of each digit is left to test
    parser.add_argument("--per-class", type=per_class, default=10, help="labelled training images per digit")
    parser.add_argument("--eval-per-class", type=count().parse, default=60, help="test images per digit")
    parser.add_argument("--epochs", type=count().parse, help="default: zoo finetune's, from the data's size")
    parser.add_argument("--lr", type=Bounds(0, 10, low_open=True).parse, help="default: zoo finetune's")
    parser.add_argument("--seed", type=count(0, SEED_MAX).parse, default=0)
    # where both arms train and are tested, and their data-loading processes: passed on to zoo finetune,
    # with its words (the test images load with --num-workers too, 0 when it is left to finetune to measure)
    parser.add_argument("--device", help=_config_help("device"))
    parser.add_argument("--num-workers", type=WORKERS.parse, help=_config_help("num_workers"))


def _config_help(name: str) -> str:
    """The help of TrainConfig field ``name``'s option: the demo's flag means what finetune's does."""
    return next(f for f in dataclasses.fields(TrainConfig) if f.name == name).metadata["option"]["help"]
