"""`zoo.finetune`: ``zoo finetune`` from Python, its long flags as keyword arguments.

    >>> import zoo
    >>> result = zoo.finetune("resnet20.fmnist", "digits/", "runs/digits", epochs=3, batch_size=32)
    >>> result.metrics["val_acc"], zoo.load(result.out)

Each flag of ``zoo finetune --help`` is a keyword with ``_`` for ``-`` (``--batch-size 32``:
``batch_size=32``; a switch: ``hflip=True``), and so is each field of `TrainConfig`,
`FinetuneOptions` and `MoleculeOptions`; a flag named unlike its field takes either name
(``clip_grad=`` or ``clip_grad_norm=``, ``scratch=True`` or ``pretrained=False``). The
`TrainConfig` fields a call names are the ones it gives: the others take the data's own
defaults where it has some (molecules': `zoo.training.finetune.defaults`), as on the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset

from zoo.errors import InvalidArgumentError
from zoo.training.data.images.augment import Augment
from zoo.training.data.molecules.molecule_files import MoleculeOptions
from zoo.training.finetune import finetuning
from zoo.training.finetune.distill import Distillation
from zoo.training.finetune.options import FinetuneOptions
from zoo.training.loop.callbacks import Callback
from zoo.training.loop.train_config import TrainConfig, option_fields

__all__ = ["KEYWORDS", "finetune"]


def _names(owner: type, *left_out: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(owner) if f.name not in left_out)


TRAIN_FIELDS = _names(TrainConfig, "out_dir")  # out_dir is ``out``
OPTION_FIELDS = _names(FinetuneOptions)
MOLECULE_FIELDS = _names(MoleculeOptions, "graph_model")  # finetune sets the model that reads them
AUGMENT_FIELDS = _names(Augment)  # --hflip, --crop-padding, ...: FinetuneOptions.augment
DISTILL_FLAGS = {  # flag keyword -> Distillation field: FinetuneOptions.distill
    "teacher": "teacher",
    "distill_alpha": "alpha",
    "distill_kind": "kind",
    "distill_temperature": "temperature",
    "teacher_bf16": "bf16",
}
# the flags named unlike their field: keyword -> (field, whether the flag's value is the field's inverse)
RENAMED: dict[str, tuple[str, bool]] = {
    **{
        f.metadata["option"]["flag"].lstrip("-").replace("-", "_"): (f.name, False)
        for f in option_fields()
        if f.metadata["option"]["flag"]
    },  # clip_grad, ema, early_stopping
    **{f"no_{f.name}": (f.name, True) for f in option_fields() if f.default is True},  # no_progress, no_tensorboard
    "scratch": ("pretrained", True),
    "no_post_training": ("post_training", True),
}
NO_AUGMENT = "no_augment"  # --no-augment: augment=Augment(), no augmentation (None takes the data's default)
KEYWORDS = frozenset(
    {*TRAIN_FIELDS, *OPTION_FIELDS, *MOLECULE_FIELDS, *AUGMENT_FIELDS, *DISTILL_FLAGS, *RENAMED, NO_AUGMENT}
)


def finetune(
    name: str,
    data: str | os.PathLike | Dataset,
    out: str | os.PathLike,
    *,
    callbacks: Sequence[Callback] | None = None,
    **flags: Any,
) -> finetuning.FinetuneResult:
    """Fine-tune NAME on ``data`` (a path ``--data`` takes, or a torch_geometric dataset) and save the best
    epoch's model, card, metrics and curves to ``out``, as ``zoo finetune NAME --data DATA
    --out OUT`` does with the same flags, given as keywords: ``epochs=3, batch_size=32, lr=1e-3,
    mode="partial", val_data="val/", task="regression", progress=False`` (the module
    docstring says how flags become keywords). Returns the `FinetuneResult`: the model (best
    epoch, on CPU), ``out``, the best epoch's metrics and the history. An unknown keyword is
    an `InvalidArgumentError` naming it and the close ones. ``callbacks``, ``fn(trainer, metrics)``
    after each epoch, are the Trainer's (`zoo.training.loop.callbacks`; ``zoo tune`` prunes with one)."""
    _check_arguments(name, data, out, callbacks)
    fields = _by_field(flags)
    given = {key for key in fields if key in TRAIN_FIELDS}
    config = TrainConfig(**{key: fields[key] for key in given}, out_dir=os.fspath(out))
    options = _options(fields)
    if options.command is None:
        shown = ", ".join([repr(name), repr(os.fspath(data)) if isinstance(data, (str, os.PathLike)) else "DATASET"])
        keywords = "".join(f", {key}={value!r}" for key, value in flags.items())
        options = dataclasses.replace(options, command=f"zoo.finetune({shown}, {os.fspath(out)!r}{keywords})")
    return finetuning.finetune_with_config(name, data, out, options, config=config, given=given, callbacks=callbacks)


def _check_arguments(name: Any, data: Any, out: Any, callbacks: Any) -> None:
    """The positional arguments' and ``callbacks``' types, each refused by name with what it takes."""
    if not isinstance(name, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"zoo.finetune(): name must be a model name or a saved folder (a string), got {type(name).__name__}"
        )
    if not isinstance(data, (str, os.PathLike, Dataset)):
        raise InvalidArgumentError(
            f"zoo.finetune(): data must be a path (a folder of images, an image list, .csv/.jsonl rows, a .pt/.npz "
            f"file, shards, molecules) or a torch_geometric dataset, got {type(data).__name__}"
        )
    if isinstance(data, Dataset) and not _is_pyg(data):
        raise InvalidArgumentError(
            f"zoo.finetune(): data is a {type(data).__name__}; it takes paths and torch_geometric datasets: save "
            "tensors with torch.save({'x': X, 'y': Y}, 'data.pt') and pass 'data.pt', or train any Dataset with "
            "zoo.training.Trainer(model, config).fit(train, val)"
        )
    if not isinstance(out, (str, os.PathLike)):
        raise InvalidArgumentError(f"zoo.finetune(): out must be the folder to save the run in, got {out!r:.60}")
    if callbacks is not None and (isinstance(callbacks, str) or not all(callable(c) for c in callbacks)):
        raise InvalidArgumentError("zoo.finetune(): callbacks must be a list of functions fn(trainer, metrics)")


def _is_pyg(data: Dataset) -> bool:
    return any(cls.__module__.startswith("torch_geometric") for cls in type(data).__mro__)


SIMPLE_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}


def _check_field_types(fields: Mapping[str, Any]) -> None:
    """The keywords of `FinetuneOptions`, `MoleculeOptions` and `Augment` whose field is a plain
    bool, int, float or str (or None): a value of another type refused by name (``label_field=3``)."""
    owners = (FinetuneOptions, MoleculeOptions, Augment)
    types = {f.name: str(f.type) for owner in owners for f in dataclasses.fields(owner)}
    for key, value in fields.items():
        if key not in types or key in TRAIN_FIELDS:  # TrainConfig checks its own
            continue
        parts = [part.strip() for part in types[key].split("|")]
        if not all(part in SIMPLE_TYPES or part == "None" for part in parts):
            continue
        allowed = tuple(t for part in parts if part in SIMPLE_TYPES for t in SIMPLE_TYPES[part])
        ok = (value is None and "None" in parts) or (
            isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool))
        )
        if not ok:
            raise InvalidArgumentError(f"zoo.finetune(): {key} must be {' or '.join(parts)}, got {value!r:.60}")


def _by_field(flags: Mapping[str, Any]) -> dict[str, Any]:
    """``flags`` by field name (a renamed flag as its field, an inverted one's value inverted);
    an unknown keyword, or a field named twice, refused by name."""
    fields: dict[str, Any] = {}
    for key, value in flags.items():
        if key not in KEYWORDS:
            raise InvalidArgumentError(_unknown(key))
        field, inverted = RENAMED.get(key, (key, False))
        if field in fields:
            twins = sorted(k for k in flags if RENAMED.get(k, (k, False))[0] == field)
            raise InvalidArgumentError(f"zoo.finetune(): {' and '.join(twins)} set the same thing; pass one of them")
        if inverted and not isinstance(value, bool):
            raise InvalidArgumentError(f"zoo.finetune(): {key} is a switch, True or False, got {value!r}")
        fields[field] = not value if inverted else value
    _check_field_types(fields)
    return fields


def _unknown(key: str) -> str:
    """The message for an unknown keyword: the close ones, and where the others are listed."""
    close = difflib.get_close_matches(key, sorted(KEYWORDS), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(f'{c}=' for c in close)}? " if close else ""
    return (
        f"zoo.finetune() got an unknown keyword {key}=: {hint}(its keywords are zoo finetune's long flags with _ "
        "for -, e.g. epochs=, batch_size=, lr=, mode=, val_data=, task=, progress=; `zoo finetune --help` "
        "lists them)"
    )


def _options(fields: dict[str, Any]) -> FinetuneOptions:
    """The `FinetuneOptions` of the keywords: augmentation, teacher and molecule flags gathered
    into their objects (each refused beside the object itself)."""
    options = {key: fields[key] for key in OPTION_FIELDS if key in fields}
    if fields.get(NO_AUGMENT):
        if "augment" in options or any(key in fields for key in AUGMENT_FIELDS):
            raise InvalidArgumentError("zoo.finetune(): no_augment=True turns augmentation off: drop the other")
        options["augment"] = Augment()
    groups = (
        ("augment", Augment, {key: key for key in AUGMENT_FIELDS}),
        ("distill", Distillation, DISTILL_FLAGS),
        ("molecules", MoleculeOptions, {key: key for key in MOLECULE_FIELDS}),
    )
    for option, owner, flag_fields in groups:
        named = {flag_fields[key]: fields[key] for key in flag_fields if key in fields}
        if not named:
            continue
        if option in options:
            raise InvalidArgumentError(
                f"zoo.finetune(): {', '.join(k for k in flag_fields if k in fields)} and {option}= set the same "
                f"thing; pass the flags or {option}={owner.__name__}(...), not both"
            )
        if owner is Distillation and "teacher" not in named:
            raise InvalidArgumentError(
                f"zoo.finetune(): {', '.join(k for k in flag_fields if k in fields)} tune a teacher: add teacher="
            )
        value = owner(**named)
        options[option] = None if owner is not Distillation and value == owner() else value
    return FinetuneOptions(**options)
