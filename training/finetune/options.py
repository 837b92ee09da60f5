"""What a fine-tuning run (`zoo.finetune`, `finetuning.finetune_with_config`) is asked, besides
the `TrainConfig` of its training loop: `FinetuneOptions`, and the ``zoo finetune`` command-line
options that make both (`add_arguments`, `options_from_args`; the TrainConfig options come from
its own fields)."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from zoo.bounds import TEXT_TOKENS, Bounds, bounded, check_fields, count
from zoo.errors import InvalidArgumentError
from zoo.training.data.images.augment import Augment
from zoo.training.data.molecules.molecule_files import SPLITS, TASKS, MoleculeOptions
from zoo.training.data.shards.shard_files import shared_shards
from zoo.training.data.shards.shard_source import BUFFER, SHUFFLE_BUFFER
from zoo.training.finetune import defaults
from zoo.training.finetune.distill import Distillation
from zoo.training.finetune.stages import MODES
from zoo.training.loop.steps import REGRESSION_LOSSES
from zoo.training.loop.train_config import TrainConfig, add_config_options

MAX_IMAGE_SIZE = 4096  # pixels a side at most
FLAGS = {
    "stages": "--stages",
    "layer_decay": "--layer-decay",
    "val_fraction": "--val-fraction",
    "limit": "--limit",
    "image_size": "--image-size",
    "max_length": "--max-length",
    "shuffle_buffer": "--shuffle-buffer",
    "head_epochs": "--head-epochs",
}


@dataclass(frozen=True)
class FinetuneOptions:
    """How `finetune` fine-tunes, beyond the training loop's `TrainConfig`. Which weights train:
    ``mode`` (see `zoo.training.finetune.stages`), the last ``stages`` in partial mode, ``layer_decay``.
    The model: ``pretrained=False`` starts NAME's architecture from random weights;
    ``model_kwargs`` are architecture options (e.g. ``{"sizes": [64, 32, 16]}`` for a DBN).
    The data: ``images`` is the folder an image list's paths are under (the list's own folder
    otherwise); ``val_data`` replaces the fixed-seed hold-out of ``val_fraction``; ``limit``
    keeps that many training samples; ``image_size`` resizes images (the model's own size
    otherwise); ``augment`` is for images; ``max_length`` tokens are kept per text row;
    ``shuffle_buffer`` samples are held to shuffle WebDataset shards (0: their own order).
    ``head_epochs`` of training the head alone come first when it is a fresh class head and the weights
    pretrained (None: `zoo.training.finetune.defaults.head_epochs`: a `HEAD_SHARE` of the epochs, none
    for molecules; 0: none);
    ``augment=None`` takes the data's default (`default_augment`), ``Augment()`` none.
    ``molecules`` says how a molecule file is read (label, task, split, bad rows); ``loss`` is
    a regression's (mse or huber). ``distill`` adds a teacher's predictions to the loss. The run: ``post_training`` adds the
    evaluation report and exports (`zoo.training.finetune.post_training`), ``compression`` int8
    quantization and magnitude pruning measured on the validation set; with
    ``overwrite`` the files an earlier run wrote to the output folder are removed first;
    ``command`` is the command line the model card records."""

    mode: str = "full"
    stages: int = field(default=1, metadata=bounded(count()))
    layer_decay: float | None = field(default=None, metadata=bounded(Bounds(0, 1, low_open=True)))
    head_epochs: float | None = field(default=None, metadata=bounded(Bounds(0, 1000)))
    pretrained: bool = True
    model_kwargs: Mapping[str, Any] | None = None
    val_data: str | os.PathLike | None = None
    images: str | os.PathLike | None = None
    val_fraction: float = field(default=0.1, metadata=bounded(Bounds(0, 1, high_open=True)))
    limit: int | None = field(default=None, metadata=bounded(count()))
    image_size: int | None = field(default=None, metadata=bounded(count(1, MAX_IMAGE_SIZE)))
    augment: Augment | None = None
    max_length: int = field(default=512, metadata=bounded(TEXT_TOKENS))
    shuffle_buffer: int = field(default=SHUFFLE_BUFFER, metadata=bounded(BUFFER))
    distill: Distillation | None = None
    molecules: MoleculeOptions | None = None
    loss: str = "mse"
    post_training: bool = True
    compression: bool = False
    overwrite: bool = False
    command: str | None = None

    def __post_init__(self) -> None:
        check_fields(self, "FinetuneOptions", FLAGS)
        if self.mode not in MODES:
            raise InvalidArgumentError(
                f"FinetuneOptions.mode (--mode) must be one of {', '.join(MODES)}, got {self.mode!r}"
            )
        if self.loss not in REGRESSION_LOSSES:
            raise InvalidArgumentError(
                f"FinetuneOptions.loss (--loss) must be one of {', '.join(REGRESSION_LOSSES)}, got {self.loss!r}"
            )


def json_object(example: str) -> Callable[[str], dict[str, Any]]:
    """An argparse ``type=`` reading a JSON object (``--model-kwargs``, zoo tune's ``--first``);
    its errors show ``example``."""

    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"must be a JSON object, e.g. '{example}': {error}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"must be a JSON object, e.g. '{example}', got {text!r}")
        return value

    return parse


def _checked(owner: type, name: str) -> Any:
    """The argparse ``type=`` of the option for field ``name`` of dataclass ``owner``: its bounds' parser."""
    return next(f for f in fields(owner) if f.name == name).metadata["bounds"].parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `finetune` options (shared by ``zoo finetune`` and ``python -m zoo.training.finetune``)."""
    parser.add_argument(
        "name", help="weight name (arch.tag), a directory written by zoo.save, or a bare architecture (from scratch)"
    )
    parser.add_argument(
        "--data",
        required=True,
        help="image folder; image list (a folder with metadata.csv/.jsonl, or a .csv/.jsonl with a file_name "
        "column: see --images); .csv/.jsonl of text,label or of smiles,label; .sdf molecules; .pt/.npz tensors; "
        "WebDataset shards; or fashion-mnist",
    )
    parser.add_argument("--out", required=True, help="output directory: model, card, metrics, plots, logs, checkpoints")
    g = parser.add_argument_group("transfer")
    g.add_argument("--mode", choices=MODES, default="full")
    g.add_argument(
        "--stages",
        type=_checked(FinetuneOptions, "stages"),
        default=1,
        help="partial mode: how many of the last stages train",
    )
    g.add_argument(
        "--layer-decay", type=_checked(FinetuneOptions, "layer_decay"), help="layer-wise lr decay factor, e.g. 0.75"
    )
    g.add_argument(
        "--head-epochs",
        type=_checked(FinetuneOptions, "head_epochs"),
        help="epochs a fresh class head trains alone first, the body frozen (default: a tenth of the epochs, "
        "none for molecules; 0: none)",
    )
    g.add_argument("--scratch", action="store_true", help="random weights for NAME's architecture")
    g.add_argument(
        "--model-kwargs",
        type=json_object('{"sizes": [64, 32]}'),
        metavar="JSON",
        help="architecture options, e.g. '{\"sizes\": [64, 32, 16]}'",
    )
    _data_arguments(parser.add_argument_group("data"))
    _molecule_arguments(parser.add_argument_group("labels and molecules"))
    _distillation_arguments(parser.add_argument_group("distillation"))
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
            "profile": _post_training_arguments,
        },
    )
    _data_defaults_help(parser)


def _post_training_arguments(group: Any) -> None:
    group.add_argument("--no-post-training", action="store_true", help="skip the report and the exports")
    group.add_argument(
        "--compression",
        action="store_true",
        help="after training, also measure int8 quantization and magnitude pruning on the validation set (tens of "
        "seconds on a small CNN; zoo.optimize and zoo export quantize on demand)",
    )


def _data_defaults_help(parser: argparse.ArgumentParser) -> None:
    """The help of the options whose defaults the data chooses (`zoo.training.finetune.defaults`)."""
    low, high = defaults.TRANSFER_EPOCHS
    (small, first), (medium, second) = defaults.BATCH_SIZES
    molecules_low, molecules_high = defaults.MOLECULE_EPOCHS
    shown = {
        "epochs": f"default: from the data's size, about {defaults.TRANSFER_STEPS} optimizer steps in {low} to {high} "
        f"epochs (molecules: {defaults.MOLECULE_STEPS:,} in {molecules_low} to {molecules_high})",
        "batch_size": f"per process and micro-batch (default: from the data's size: {first} below {small:,} samples, "
        f"{second} below {medium:,}, else {TrainConfig.batch_size}; molecules {TrainConfig.batch_size})",
        "warmup_epochs": f"default: {defaults.WARMUP_SHARE:.0%} of the epochs (molecules: "
        f"{defaults.MOLECULE_FIELDS['warmup_epochs']:g})",
    }
    for action in parser._actions:
        if action.dest in shown:
            action.help = shown[action.dest].replace("%", "%%")


def _data_arguments(g: argparse._ArgumentGroup) -> None:
    """The ``data`` options: validation, limits, sizes, augmentation, loader workers."""
    g.add_argument(
        "--images", metavar="DIR", help="image lists: the folder the list's paths are under (default: its own)"
    )
    g.add_argument("--val-data", help="separate validation data (default: a fixed-seed hold-out)")
    g.add_argument("--val-fraction", type=_checked(FinetuneOptions, "val_fraction"), default=0.1)
    g.add_argument("--limit", type=_checked(FinetuneOptions, "limit"), help="use only this many training samples")
    g.add_argument("--image-size", type=_checked(FinetuneOptions, "image_size"), help="resize images to this size")
    g.add_argument(
        "--max-length", type=_checked(FinetuneOptions, "max_length"), default=512, help="text: tokens kept per row"
    )
    g.add_argument(
        "--shuffle-buffer",
        type=_checked(FinetuneOptions, "shuffle_buffer"),
        default=SHUFFLE_BUFFER,
        help="shards: samples held to shuffle them (memory is this many samples; 0 keeps the shards' order)",
    )
    g.add_argument(
        "--no-augment",
        action="store_true",
        help="no augmentation (default: images of at most 64 px get --crop-padding side/14)",
    )
    g.add_argument("--hflip", action="store_true", help="random horizontal flips")
    g.add_argument(
        "--crop-padding", type=_checked(Augment, "crop_padding"), default=0, help="pad by this and random-crop back"
    )
    g.add_argument(
        "--random-resized-crop",
        type=_checked(Augment, "random_resized_crop"),
        metavar="MIN_SCALE",
        help="RandomResizedCrop down to this area",
    )
    g.add_argument("--color-jitter", type=_checked(Augment, "color_jitter"), default=0.0)
    g.add_argument("--trivial-augment", action="store_true")
    g.add_argument("--random-erasing", type=_checked(Augment, "random_erasing"), default=0.0, metavar="P")
    add_config_options(g, "data")


def _molecule_arguments(g: argparse._ArgumentGroup) -> None:
    """The ``labels`` options: which field is the label, the task, the tags' delimiter, the loss;
    the molecules' split and bad rows."""
    g.add_argument(
        "--label-field",
        help="the label's column (image lists, text rows, molecules: when there are several) or SDF data field",
    )
    g.add_argument("--smiles-field", default="smiles", metavar="NAME", help="molecules in a .csv/.jsonl: the "
                   "SMILES column (default smiles, any case; BACE's is mol)")  # fmt: skip
    g.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="auto: molecules' numeric labels are regression; image lists' and text rows' are when not all whole, "
        "lists of tags (or 0/1 columns) multi-label, others classes",
    )
    g.add_argument(
        "--label-delimiter",
        default=" ",
        metavar="TEXT",
        help="multi-label: what separates the tags of a CSV field (default a space)",
    )
    g.add_argument(
        "--split", choices=SPLITS, default="random", help="validation split: random, or by Bemis-Murcko scaffold"
    )
    g.add_argument(
        "--skip-bad-rows", action="store_true", help="skip (and count) molecules RDKit cannot read, instead of stopping"
    )
    g.add_argument("--loss", choices=REGRESSION_LOSSES, default="mse", help="regression loss (standardised targets)")


def molecules_from_args(args: argparse.Namespace) -> MoleculeOptions | None:
    """The `MoleculeOptions` of the molecule options (None when all are left at their defaults;
    `finetune` adds the model that reads graphs)."""
    options = MoleculeOptions(
        args.label_field, args.task, args.split, args.skip_bad_rows, None, args.label_delimiter, args.smiles_field
    )
    return None if options == MoleculeOptions() else options


def _distillation_arguments(g: argparse._ArgumentGroup) -> None:
    """The ``distillation`` options: the teacher and how it teaches."""
    g.add_argument("--teacher", help="also learn from this model's predictions (a weight name or a fine-tuned folder)")
    g.add_argument(
        "--distill-alpha", type=_checked(Distillation, "alpha"), default=0.5, help="the teacher's share of the loss"
    )
    g.add_argument(
        "--distill-kind",
        choices=("hard", "soft"),
        default="hard",
        help="the teacher's argmax labels (DeiT) or its softened distribution (Hinton)",
    )
    g.add_argument(
        "--distill-temperature",
        type=_checked(Distillation, "temperature"),
        default=1.0,
        help="soft: the softmax temperature",
    )
    g.add_argument("--teacher-bf16", action="store_true", help="run the teacher under bfloat16 autocast")


def augment_from_args(args: argparse.Namespace) -> Augment | None:
    """The augmentation the data options ask for (None: none asked, the data's default;
    ``Augment()`` with --no-augment)."""
    augment = Augment(
        hflip=args.hflip,
        crop_padding=args.crop_padding,
        random_resized_crop=args.random_resized_crop,
        color_jitter=args.color_jitter,
        trivial_augment=args.trivial_augment,
        random_erasing=args.random_erasing,
    )
    if getattr(args, "no_augment", False):
        if augment != Augment():
            raise InvalidArgumentError("--no-augment turns augmentation off: drop it or the augmentation flags")
        return augment
    return None if augment == Augment() else augment


def distillation_from_args(args: argparse.Namespace) -> Distillation | None:
    """The teacher of the distillation options (None without ``--teacher``)."""
    if args.teacher is None:
        return None
    return Distillation(
        args.teacher, args.distill_alpha, args.distill_kind, args.distill_temperature, args.teacher_bf16
    )


def warn_shared_shards(data: str | os.PathLike, val_data: str | os.PathLike | None) -> None:
    """Warn, naming them, of shards that ``val_data`` (--val-data) and ``data`` (--data) both name."""
    shared = shared_shards(data, val_data) if val_data is not None else []
    if val_data is not None and shared:
        shown = ", ".join(shared[:3]) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
        warnings.warn(
            f"--val-data {os.fspath(val_data)!r} names {len(shared)} shard(s) that --data trains on: {shown}; "
            "validation on them says little of unseen data: validate on shards apart",
            stacklevel=2,
        )


def options_from_args(args: argparse.Namespace, command: str | None = None) -> FinetuneOptions:
    """The `FinetuneOptions` of parsed `add_arguments` options (a --val-data that shares shards
    with --data is warned about by `finetune`, `warn_shared_shards`); ``command`` is the command line."""
    return FinetuneOptions(
        mode=args.mode,
        stages=args.stages,
        layer_decay=args.layer_decay,
        head_epochs=args.head_epochs,
        pretrained=not args.scratch,
        model_kwargs=args.model_kwargs,
        val_data=args.val_data,
        images=args.images,
        val_fraction=args.val_fraction,
        limit=args.limit,
        image_size=args.image_size,
        augment=augment_from_args(args),
        max_length=args.max_length,
        shuffle_buffer=args.shuffle_buffer,
        distill=distillation_from_args(args),
        molecules=molecules_from_args(args),
        loss=args.loss,
        post_training=not args.no_post_training,
        compression=args.compression,
        overwrite=args.overwrite,
        command=command,
    )
