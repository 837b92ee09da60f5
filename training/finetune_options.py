"""What `zoo.training.finetune.finetune` is asked, besides the `TrainConfig` of its training
loop: `FinetuneOptions`, and the ``zoo finetune`` command-line options that make both
(`add_arguments`, `options_from_args`; the TrainConfig options come from its own fields)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zoo.training.config import add_config_options
from zoo.training.data import Augment
from zoo.training.distill import Distillation
from zoo.training.stages import MODES


@dataclass(frozen=True)
class FinetuneOptions:
    """How `finetune` fine-tunes, beyond the training loop's `TrainConfig`. Which weights train:
    ``mode`` (see `zoo.training.stages`), the last ``stages`` in partial mode, ``layer_decay``.
    The model: ``pretrained=False`` starts NAME's architecture from random weights;
    ``model_kwargs`` are architecture options (e.g. ``{"sizes": [64, 32, 16]}`` for a DBN).
    The data: ``val_data`` replaces the fixed-seed hold-out of ``val_fraction``; ``limit``
    keeps that many training samples; ``image_size`` resizes images (the model's own size
    otherwise); ``augment`` is for images; ``max_length`` tokens are kept per text row.
    ``distill`` adds a teacher's predictions to the loss. The run: ``post_training`` adds the
    evaluation report, exports, int8 and pruning (`zoo.training.post_training`); with
    ``overwrite`` the files an earlier run wrote to the output folder are removed first;
    ``command`` is the command line the model card records."""

    mode: str = "full"
    stages: int = 1
    layer_decay: float | None = None
    pretrained: bool = True
    model_kwargs: Mapping[str, Any] | None = None
    val_data: str | os.PathLike | None = None
    val_fraction: float = 0.1
    limit: int | None = None
    image_size: int | None = None
    augment: Augment | None = None
    max_length: int = 512
    distill: Distillation | None = None
    post_training: bool = True
    overwrite: bool = False
    command: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `finetune` options (shared by ``zoo finetune`` and ``python -m zoo.training.finetune``)."""
    parser.add_argument(
        "name", help="weight name (arch.tag), a directory written by zoo.save, or a bare architecture (from scratch)"
    )
    parser.add_argument(
        "--data", required=True, help="image folder, .csv/.jsonl of text,label, .pt/.npz tensors, or fashion-mnist"
    )
    parser.add_argument("--out", required=True, help="output directory: model, card, metrics, plots, logs, checkpoints")
    g = parser.add_argument_group("transfer")
    g.add_argument("--mode", choices=MODES, default="full")
    g.add_argument("--stages", type=int, default=1, help="partial mode: how many of the last stages train")
    g.add_argument("--layer-decay", type=float, help="layer-wise lr decay factor, e.g. 0.75")
    g.add_argument("--scratch", action="store_true", help="random weights for NAME's architecture")
    g.add_argument(
        "--model-kwargs", type=json.loads, metavar="JSON", help="architecture options, e.g. '{\"sizes\": [64, 32, 16]}'"
    )
    g = parser.add_argument_group("data")
    g.add_argument("--val-data", help="separate validation data (default: a fixed-seed hold-out)")
    g.add_argument("--val-fraction", type=float, default=0.1)
    g.add_argument("--limit", type=int, help="use only this many training samples")
    g.add_argument("--image-size", type=int, help="resize images to this size")
    g.add_argument("--max-length", type=int, default=512, help="text: tokens kept per row")
    g.add_argument("--hflip", action="store_true", help="random horizontal flips")
    g.add_argument("--crop-padding", type=int, default=0, help="pad by this and random-crop back")
    g.add_argument("--random-resized-crop", type=float, metavar="MIN_SCALE", help="RandomResizedCrop down to this area")
    g.add_argument("--color-jitter", type=float, default=0.0)
    g.add_argument("--trivial-augment", action="store_true")
    g.add_argument("--random-erasing", type=float, default=0.0, metavar="P")
    add_config_options(g, "data")
    g = parser.add_argument_group("distillation")
    g.add_argument("--teacher", help="also learn from this model's predictions (a weight name or a fine-tuned folder)")
    g.add_argument("--distill-alpha", type=float, default=0.5, help="the teacher's share of the loss")
    g.add_argument(
        "--distill-kind",
        choices=("hard", "soft"),
        default="hard",
        help="the teacher's argmax labels (DeiT) or its softened distribution (Hinton)",
    )
    g.add_argument("--distill-temperature", type=float, default=1.0, help="soft: the softmax temperature")
    g.add_argument("--teacher-bf16", action="store_true", help="run the teacher under bfloat16 autocast")
    for section in ("optimisation", "hardware"):
        add_config_options(parser.add_argument_group(section), section)
    add_config_options(
        parser.add_argument_group("run"),
        "run",
        after={
            "resume": lambda g: g.add_argument(
                "--overwrite",
                action="store_true",
                help="OUT may hold an earlier run: remove the files it wrote first (other files stay)",
            ),
            "profile": lambda g: g.add_argument(
                "--no-post-training", action="store_true", help="skip the report, exports, int8 and pruning"
            ),
        },
    )


def augment_from_args(args: argparse.Namespace) -> Augment | None:
    """The augmentation the data options ask for (None: none asked)."""
    augment = Augment(
        hflip=args.hflip,
        crop_padding=args.crop_padding,
        random_resized_crop=args.random_resized_crop,
        color_jitter=args.color_jitter,
        trivial_augment=args.trivial_augment,
        random_erasing=args.random_erasing,
    )
    return None if augment == Augment() else augment


def distillation_from_args(args: argparse.Namespace) -> Distillation | None:
    """The teacher of the distillation options (None without ``--teacher``)."""
    if args.teacher is None:
        return None
    return Distillation(
        args.teacher, args.distill_alpha, args.distill_kind, args.distill_temperature, args.teacher_bf16
    )


def options_from_args(args: argparse.Namespace, command: str | None = None) -> FinetuneOptions:
    """The `FinetuneOptions` of parsed `add_arguments` options; ``command`` is the command line."""
    return FinetuneOptions(
        mode=args.mode,
        stages=args.stages,
        layer_decay=args.layer_decay,
        pretrained=not args.scratch,
        model_kwargs=args.model_kwargs,
        val_data=args.val_data,
        val_fraction=args.val_fraction,
        limit=args.limit,
        image_size=args.image_size,
        augment=augment_from_args(args),
        max_length=args.max_length,
        distill=distillation_from_args(args),
        post_training=not args.no_post_training,
        overwrite=args.overwrite,
        command=command,
    )
