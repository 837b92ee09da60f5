"""`DataSource`: a labelled (or unlabelled) dataset on disk described before any model is built,
and the checks every kind of data shares (class counts, at least two classes, the hold-out).
`zoo.training.data.kinds.open_data` makes one from a path."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from zoo.bounds import NAME_RULE, unprintable_name
from zoo.errors import DataError, InvalidArgumentError
from zoo.training.data.text.text_rows import clipped, plural

MAX_CLASS_INDEX = 100_000  # integer labels above this are ids, not class indices
_SCORING = contextvars.ContextVar("scoring", default=False)  # read to score a trained model (`for_scoring`)


@contextlib.contextmanager
def for_scoring() -> Iterator[None]:
    """Data read inside this scores a trained model rather than trains one: a file of one class
    is a test set like any other, and classes it lacks are no news (`check_classes`)."""
    token = _SCORING.set(True)
    try:
        yield
    finally:
        _SCORING.reset(token)


class WorkerDataError(DataError):
    """A `DataError` of a DataLoader worker: the DataLoader raises it again in the main process
    with the worker's traceback as its text; it says only its own message, in one line."""

    def __str__(self) -> str:
        text = super().__str__()
        marker = f"{type(self).__name__}: "
        return text.rsplit(marker, 1)[1].strip() if text.startswith("Caught ") and marker in text else text


class DataChangedError(WorkerDataError):
    """A file of the data, read and checked before training, that cannot be read during it:
    deleted, moved or rewritten since. The run that meets it says how it goes on
    (`zoo.training.finetune.run_folder.on_changed_data`: from its last checkpoint)."""


@dataclass
class DataSource:
    """A labelled (or, for tensors, unlabelled) dataset on disk, described before any model
    is built: what the model must fit (classes, channels, image size) and how to batch it.
    `split` turns it into training and validation datasets; ``class_counts`` (samples per
    class name, in class order) and `describe_classes` are there for the caller to show."""

    kind: Literal["images", "tensors", "text", "graphs"]
    description: str
    num_samples: int
    num_classes: int | None
    class_names: list[str] | None
    make_subset: Callable[[Sequence[int], Callable[[Any], Any] | None], Dataset]
    in_chans: int | None = None  # image channels, or node features of graphs
    image_size: tuple[int, int] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    class_counts: dict[str, int] | None = None  # samples of each class, in class_names order
    labels: Sequence[int] | torch.Tensor | None = None  # each sample's class index, in file order
    target: dict[str, Any] | None = None  # regression (num_classes 1): the target's name, mean and std
    multi_label: bool = False  # targets are multi-hot [num_classes] rows; class_names name the labels
    split_note: str = ""  # how `split` made validation, in words for the card (when not a random draw)
    task_note: str = ""  # which task the labels get and why, a line for the user (`zoo.training.data.targets`)

    def describe_classes(self) -> str:
        """What the model learns, for the caller to print before training, e.g. ``3 classes: ant
        (6), bee (6), cow (5)``, then on a line of its own the task and why (`task_note`)."""
        if self.target is not None:
            line = f"regression of {self.target['name']}: mean {self.target['mean']:.4g}, std {self.target['std']:.4g}"
        elif self.class_counts is None:
            line = "unlabelled" if self.num_classes is None else f"{self.num_classes} classes"
        else:
            counts = ", ".join(f"{name} ({count})" for name, count in self.class_counts.items())
            kind = "labels (samples with each)" if self.multi_label else "classes"
            line = f"{len(self.class_counts)} {kind}: {counts}"
        return f"{line}\n{self.task_note}" if self.task_note else line

    def split(
        self,
        val_fraction: float = 0.1,
        seed: int = 0,
        train_transform: Callable[[Any], Any] | None = None,
        eval_transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
    ) -> tuple[Dataset, Dataset | None]:
        """Training and validation datasets from one fixed-seed shuffle of the samples (the
        same seed gives the same split); ``limit`` keeps that many training samples.

        The hold-out is drawn from all samples, not per class: a class with fewer samples
        than `samples_needed` (val_fraction) gets a warning (its validation accuracy rests on
        very few samples), and a class whose every sample lands in validation is refused
        with `DataError` (nothing of it would be trained on)."""
        if not 0.0 <= val_fraction < 1.0:
            raise InvalidArgumentError(f"val_fraction must be in [0, 1), got {val_fraction}")
        order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(seed)).tolist()
        num_val = round(self.num_samples * val_fraction)
        if val_fraction > 0 and num_val == 0:
            num_val = 1
        val_indices, train_indices = order[:num_val], order[num_val:]
        if val_indices and train_indices:
            self._check_hold_out(train_indices, val_fraction, seed)
        if limit is not None:
            if limit <= 0:
                raise InvalidArgumentError(f"limit must be a positive number of samples, got {limit}")
            train_indices = train_indices[:limit]
        if not train_indices:
            raise DataError(
                f"{self.description}: no training samples left after holding out {num_val} for validation; "
                "add samples or lower --val-fraction"
            )
        train = self.make_subset(train_indices, train_transform)
        val = self.make_subset(val_indices, eval_transform) if val_indices else None
        return train, val

    def _check_hold_out(self, train_indices: list[int], val_fraction: float, seed: int) -> None:
        """Refuse classes (a multi-label's labels: their positives) the hold-out leaves without
        training samples; warn about those too small for the hold-out to hold one on average."""
        if self.labels is None or not self.class_names:
            return
        labels, num_classes = torch.as_tensor(self.labels), len(self.class_names)
        kind, kinds = ("label", "labels") if self.multi_label else ("class", "classes")
        if self.multi_label:  # multi-hot rows [N, K]: a label's samples are its positives
            total = labels.sum(0).long().tolist()
            train = labels[torch.tensor(train_indices)].sum(0).long().tolist()
        else:
            total = torch.bincount(labels.long(), minlength=num_classes).tolist()
            train = torch.bincount(labels.long()[torch.tensor(train_indices)], minlength=num_classes).tolist()
        need = samples_needed(val_fraction)
        held = f"the validation hold-out (val_fraction {val_fraction}, seed {seed})"
        starved = [c for c in range(num_classes) if total[c] and not train[c]]
        if starved:
            listed = _listed([f"{self.class_names[c]!r} ({plural(total[c], 'sample')})" for c in starved])
            raise DataError(
                f"{self.description}: {held} takes every sample of {kind if len(starved) == 1 else kinds} "
                f"{listed}, leaving none to train on; "
                f"at val_fraction {val_fraction} each {kind} needs at least {need} samples: add samples of "
                f"that {kind}, lower --val-fraction, or pass separate validation data (--val-data)"
            )
        few = [c for c in range(num_classes) if 0 < total[c] < need]
        if few:
            listed = _listed(
                [
                    f"{self.class_names[c]!r} ({plural(total[c], 'sample')}, {total[c] - train[c]} in validation)"
                    for c in few
                ]
            )
            subject = f"{kind} {listed} has" if len(few) == 1 else f"{kinds} {listed} have"
            warnings.warn(
                f"{self.description}: {subject} fewer than the {need} samples that {held} needs to hold out one "
                f"of each {kind} on average: their validation metrics rest on very few samples",
                stacklevel=3,
            )

    def full(self, transform: Callable[[Any], Any] | None = None) -> Dataset:
        """Every sample, in file order (e.g. a separate validation set)."""
        return self.make_subset(range(self.num_samples), transform)

    def over_labels(self, names: list[str], where: str) -> DataSource:
        """This multi-label data over the labels ``names`` (the training data's; its own are a
        subset of them, in any order): each sample's targets put in ``names``' order, the labels it
        lacks 0, as ``zoo eval`` maps a test file. A label ``names`` lacks is refused by name."""
        own = self.class_names or []
        unknown = [label for label in own if label not in names]
        if unknown:
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise DataError(
                f"{where}: label {clipped(unknown[0])!r}{more} is not one of the {len(names)} labels of the training "
                f"data ({_listed([repr(clipped(n)) for n in names])}); drop it from the validation data, or train on it"
            )
        order = torch.tensor([names.index(label) for label in own], dtype=torch.long)
        labels = None
        if self.labels is not None:
            labels = torch.zeros(len(self.labels), len(names))
            labels[:, order] = torch.as_tensor(self.labels, dtype=torch.float32)
        make = self.make_subset
        return dataclasses.replace(
            self, num_classes=len(names), class_names=list(names), labels=labels,
            class_counts={name: (self.class_counts or {}).get(name, 0) for name in names},
            make_subset=lambda indices, transform: _Relabelled(make(indices, transform), order, len(names)),
        )  # fmt: skip


class _Relabelled(Dataset):
    """(input, multi-hot targets) samples with the targets spread over ``width`` labels: the
    j-th goes to label ``order[j]``, the others are 0 (a list stays a list: text rows' targets)."""

    def __init__(self, dataset: Dataset, order: torch.Tensor, width: int) -> None:
        self.dataset, self.order, self.width = dataset, order, width

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        sample, target = self.dataset[index]
        hot = torch.zeros(self.width)
        hot[self.order] = torch.as_tensor(target, dtype=torch.float32)
        return sample, (hot.tolist() if isinstance(target, list) else hot)


def samples_needed(val_fraction: float) -> int:
    """Samples a class needs so that a random hold-out of ``val_fraction`` puts one of them in
    validation and leaves one for training, on average (10 at 0.1, 4 at 0.25, 2 at 0.5)."""
    if val_fraction <= 0:
        return 1
    return max(2, math.ceil(round(1 / val_fraction, 9)), math.ceil(round(1 / (1 - val_fraction), 9)))


def class_counts(labels: torch.Tensor, class_names: list[str]) -> dict[str, int]:
    """Samples of each class, by name, in class order."""
    counts = torch.bincount(labels, minlength=len(class_names)).tolist()
    return dict(zip(class_names, counts))


def check_classes(where: str, counts: dict[str, int], how_to_add: str, labels_hint: str = "") -> None:
    """At least two classes with samples (a classifier of one class learns nothing); a warning
    for declared classes without any. Data read `for_scoring` needs one class, and no warning."""
    present = [name for name, count in counts.items() if count]
    if _SCORING.get():
        if not present:
            raise DataError(f"{where} has no labelled samples to score")
        return
    if len(present) < 2:
        named = f" ({present[0]!r})" if present else ""
        raise DataError(
            f"{where} has {plural(len(present), 'class')}{named}: a classifier needs at least 2; {how_to_add}"
        )
    empty = [name for name, count in counts.items() if not count]
    if empty:
        warnings.warn(
            f"{where}: {plural(len(empty), 'class')} without samples ({', '.join(map(repr, empty[:10]))}"
            f"{', ...' if len(empty) > 10 else ''}); the model still gets an output for each{labels_hint}",
            stacklevel=4,
        )


def check_labels(where: str, counts: dict[str, int], num_samples: int) -> None:
    """Multi-label's `check_classes`: a label on every sample or on none carries no information
    (its AP is 1.0, or undefined, whatever the model does): warned about, and refused when no
    label varies (nothing to learn). No positives at all is refused (the metrics would be NaN),
    also for data read `for_scoring`, which gets no other check."""
    if not any(counts.values()):
        raise DataError(
            f"{where}: no sample has any of the {plural(len(counts), 'label')} (every target is 0): with no "
            "positives in any label there is nothing to learn or score, and mAP would be NaN; mark each "
            "sample's labels with 1"
        )
    if _SCORING.get():
        return
    always = [repr(clipped(name)) for name, count in counts.items() if count == num_samples]
    never = [repr(clipped(name)) for name, count in counts.items() if count == 0]
    if len(always) + len(never) == len(counts):  # `always` holds one at least: some label has a positive
        none = f" and none has {'the label' if len(never) == 1 else 'the labels'} {_listed(never)}" if never else ""
        raise DataError(
            f"{where}: every sample has {'the label' if len(always) == 1 else 'the labels'} {_listed(always)}{none}: "
            "no label varies, so there is nothing to learn (mAP would be 1.0 whatever the model does); add "
            "samples that differ"
        )
    said = [f"{_labels(always)} on every sample"] if always else []
    said += [f"{_labels(never)} on none"] if never else []
    if said:
        one = len(always) + len(never) == 1
        why = (
            "AP 1.0 whatever the model does"
            if not never
            else "no positive to learn"
            if not always
            else "AP 1.0, or no positive"
        )
        warnings.warn(
            f"{where}: {' and '.join(said)}: {'it carries' if one else 'they carry'} no information ({why}); drop "
            f"{'it' if one else 'them'} or add samples that differ",
            stacklevel=4,
        )


def check_class_names(where: str, names: Any, field: str = "'classes'") -> list[str]:
    """The class names a file gives under ``field``: a list of at most `MAX_CLASS_INDEX` distinct
    strings, each 1 to `zoo.bounds.MAX_CLASS_NAME` printable characters (no newlines or terminal escapes:
    they go into messages, the model's config and its card); anything else is a `DataError`
    naming ``where`` and ``field``."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{where}: {field} must be a list of class names (strings), got {type(names).__name__}")
    if len(names) > MAX_CLASS_INDEX:
        raise DataError(f"{where}: {field} names {len(names):,} classes, over the {MAX_CLASS_INDEX:,} zoo trains")
    index = unprintable_name(names)
    if index is not None:
        name = names[index]
        raise DataError(f"{where}: {field}[{index}] is {name[:40]!r}{'...' if len(name) > 40 else ''}: {NAME_RULE}")
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise DataError(f"{where}: {field} names {twice[:10]} more than once; each class needs its own name")
    alike = sorted(n for n, count in Counter(unicodedata.normalize("NFC", n) for n in names).items() if count > 1)
    if alike:  # NFC and NFD "café": two classes that print alike
        raise DataError(
            f"{where}: {field} names {alike[0]!r} twice, in different Unicode forms (NFC and NFD), which print alike; "
            "rename one (or merge them)"
        )
    return list(names)


def first_line(error: BaseException) -> str:
    """An error in one line for a message: its type and the first line of its text."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _labels(names: list[str]) -> str:
    """``label 'a' is`` or ``labels 'a', 'b' are``, for a message."""
    return f"label {names[0]} is" if len(names) == 1 else f"labels {_listed(names)} are"


def _listed(items: list[str], most: int = 10) -> str:
    """The first ``most`` items, then how many more: one error line stays short whatever the data."""
    more = f", and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more
