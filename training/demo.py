"""The main job, ``zoo demo``: transfer learning in a few minutes on 2 CPU cores, offline.

scikit-learn's handwritten digits (1797 real 8x8 scans, a domain the bundled model never saw)
are written out as an image folder of 28x28 grayscale PNGs; a few labelled images per class
train, the others measure. The bundled Fashion-MNIST ResNet-20 (``resnet20.fmnist``) is
fine-tuned on them, and the same network is trained from random weights on the same images
with the same budget and seed (`zoo.training.transfer`). Both accuracies are printed; the plot of
both runs and the fine-tuned model (``zoo.load(OUT/pretrained)``) are saved.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from zoo.bounds import SEED_MAX, Bounds, count
from zoo.errors import InvalidArgumentError
from zoo.training import finetune, transfer
from zoo.training.finetune.run_folder import Output, prepare

DEFAULT_WEIGHTS = "resnet20.fmnist"
DEMO_OUTPUTS = (Output("digits", folder=True),)  # then transfer's files and the two arms' folders
SMALLEST_DIGIT = 174  # images of the rarest digit in scikit-learn's set


def write_digits_folder(root: Path, per_class: int, eval_per_class: int, seed: int = 0) -> tuple[Path, Path]:
    """scikit-learn's digits as ``root/train/<digit>/*.png`` (``per_class`` images per digit)
    and ``root/eval/<digit>/*.png`` (up to ``eval_per_class`` others), 28x28 grayscale,
    chosen per class with ``seed``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    train_dir, eval_dir = root / "train", root / "eval"
    for label in range(10):
        indices = rng.permutation(np.flatnonzero(digits.target == label))
        if len(indices) <= per_class:
            raise InvalidArgumentError(f"digit {label} has {len(indices)} images: per_class must be below that")
        for split, chosen in ((train_dir, indices[:per_class]), (eval_dir, indices[per_class:][:eval_per_class])):
            folder = split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            for index in chosen:
                pixels = (digits.images[index] * (255 / 16)).round().astype(np.uint8)  # values are 0..16
                Image.fromarray(pixels, mode="L").resize((28, 28), Image.BILINEAR).save(folder / f"{index:04d}.png")
    return train_dir, eval_dir


def finetune_argv(args: argparse.Namespace, train_dir: Path, eval_dir: Path) -> list[str]:
    """The ``zoo finetune`` options of both arms of the demo (`zoo.training.transfer.compare`)."""
    return [
        args.weights,
        "--data",
        str(train_dir),
        "--val-data",
        str(eval_dir),
        "--out",
        str(args.out),
        "--epochs",
        str(args.epochs),
        "--batch-size",
        "32",
        "--lr",
        str(args.lr),
        "--warmup-epochs",
        str(min(1.0, args.epochs / 2)),  # below --epochs
        "--crop-padding",
        "2",
        "--seed",
        str(args.seed),
        "--no-post-training",
        "--overwrite",  # the demo's own folder
    ]


def run(args: argparse.Namespace, command: str | None = None) -> dict[str, Any]:
    """Write the digits folder, run both arms and print the comparison."""
    out = Path(args.out)
    with prepare(out, DEMO_OUTPUTS, resume=False, overwrite=True).sealing():  # the last demo's digits go
        train_dir, eval_dir = write_digits_folder(out / "digits", args.per_class, args.eval_per_class, args.seed)
    parser = argparse.ArgumentParser()
    finetune.add_arguments(parser)
    print(
        f"digits: {args.per_class} labelled images per class in {train_dir}, "
        f"{sum(1 for _ in eval_dir.rglob('*.png'))} for evaluation in {eval_dir}"
    )
    summary = transfer.compare(parser.parse_args(finetune_argv(args, train_dir, eval_dir)), command=command)
    pretrained, scratch = (
        summary["runs"][arm]["best"].get("val_acc", float("nan")) for arm in ("pretrained", "scratch")
    )
    print(
        f"\naccuracy on {eval_dir.parent.name}/eval: fine-tuned from {args.weights} {pretrained:.1%}, "
        f"from scratch {scratch:.1%} (same network, images, epochs and seed)"
    )
    print(f"fine-tuned model: {out / 'pretrained'} (zoo.load('{out / 'pretrained'}'))")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", default=DEFAULT_WEIGHTS, help="weights to fine-tune (arch.tag or a zoo.save folder)"
    )
    parser.add_argument("--out", default="runs/demo", help="output folder")
    per_class = count(1, SMALLEST_DIGIT - 1).parse  # one image of each digit is left to evaluate
    parser.add_argument("--per-class", type=per_class, default=10, help="labelled training images per digit")
    parser.add_argument("--eval-per-class", type=count().parse, default=60, help="evaluation images per digit")
    parser.add_argument("--epochs", type=count().parse, default=30)
    parser.add_argument("--lr", type=Bounds(0, 10, low_open=True).parse, default=1e-3)
    parser.add_argument("--seed", type=count(0, SEED_MAX).parse, default=0)
