"""The targets of a labelled table (image lists, text rows), one reading for every task:

- classes: names (numbered in sorted order) or whole numbers (class indices as they are);
- regression: finite numbers, standardised for training (their mean and std recorded in the
  model's config, as molecules' are);
- multi-label: a JSON list of tags, a delimited tags field (``--label-delimiter``, default a
  space, fastai's convention) or one 0/1 column per label, as a multi-hot float target.

``task="auto"`` picks multi-label when a label is a JSON list or several 0/1 columns are the
label, regression when every label is a number and some are not whole, classes otherwise
(molecules keep their own rule: numbers are a regression). A bad label is a `DataError` naming
the file, the line and the field."""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from zoo.bounds import NAME_RULE, unprintable_name
from zoo.errors import DataError
from zoo.training.data.labels import class_index, finite_number, is_number, number_problem
from zoo.training.data.source import MAX_CLASS_INDEX, check_class_names, check_classes, check_labels, class_counts
from zoo.training.data.text.text_rows import plural, shown_names

TABLE_TASKS = ("auto", "classification", "regression", "multi-label")
_CLASS_INDEX = re.compile(r"-?(0|[1-9][0-9]*)")  # "00" and "01" are names as written, not indices 0 and 1
Row = tuple[
    int | str, Any
]  # (line (or 'sample N'), the label as read: a string, a JSON value, or a list of 0/1 per label column)


@dataclass
class Targets:
    """What a table's labels say: the task, the target per sample (long class indices [N],
    float values [N] or a float multi-hot [N, K]), the class or label names with their
    counts (positives per label for multi-label), a regression's statistics, and a line for
    the user saying which task and why."""

    task: str
    values: torch.Tensor
    names: list[str] | None
    counts: dict[str, int] | None
    target: dict[str, Any] | None
    note: str

    @property
    def what(self) -> str:
        """The targets in a few words, for a data source's description."""
        if self.target is not None:
            return f"regression of {self.target['name']!r}"
        count = len(self.names or [])
        return plural(count, "label") + " (multi-label)" if self.task == "multi-label" else plural(count, "class")

    def source_fields(self) -> dict[str, Any]:
        """The `DataSource` fields these targets fill."""
        return {
            "num_classes": 1 if self.task == "regression" else len(self.names or []),
            "class_names": self.names,
            "class_counts": self.counts,
            "labels": self.values if self.task in ("classification", "multi-label") else None,
            "target": self.target,
            "multi_label": self.task == "multi-label",
        }


def choose_task(
    rows: Sequence[Row], task: str, columns: Sequence[str] | None = None, delimiter: str = " "
) -> tuple[str, str]:
    """The task ``rows`` get and why, in words: ``task`` when asked, else the auto rule (module docstring)."""
    if task not in TABLE_TASKS:
        raise DataError(f"task (--task) must be one of {', '.join(TABLE_TASKS)}, got {task!r}")
    if task != "auto":
        return task, f"task: {task} (--task {task})"
    if columns is not None and len(columns) > 1:
        return "multi-label", f"task: multi-label (one 0/1 column per label: {shown_names(columns)})"
    values = [label for _, label in rows]
    if any(isinstance(label, list) for label in values):
        return "multi-label", "task: multi-label (the labels are lists)"
    numbers = [_as_number_text(label) for label in values]
    if values and all(n is not None and is_number(n) for n in numbers):
        finite = [finite_number(n) for n in numbers if n is not None]
        if any(v is not None and not v.is_integer() for v in finite):
            return (
                "regression",
                "task: regression (the labels are numbers, not all whole; --task classification for classes)",
            )
    spaced = next((label for label in values if isinstance(label, str) and delimiter in label.strip()), None)
    if spaced is not None:  # Planet's "haze primary": tags, unless asked (a class may be "ankle boot")
        return "classification", (
            f"task: classification, each distinct label one class; labels such as {spaced.strip()[:40]!r} hold "
            f"{delimiter!r}: pass --task multi-label to read them as tags"
        )
    return "classification", "task: classification (--task regression or multi-label for the others)"


def read_targets(
    where: str, rows: Sequence[Row], name: str, task: str = "auto", delimiter: str = " ",
    columns: Sequence[str] | None = None,
) -> Targets:  # fmt: skip
    """The targets of ``rows`` (their lines and labels) under ``task`` (`choose_task`); ``name``
    is the label's field, ``columns`` the label columns when there are several (0/1 each)."""
    if not rows:
        raise DataError(f"{where} holds no rows; expected one row per sample")
    task, note = choose_task(rows, task, columns, delimiter)
    if task == "regression":
        return _regression(where, rows, name, note)
    if task == "multi-label":
        return _multi_label(where, rows, name, delimiter, columns, note)
    if columns is not None and len(columns) > 1:
        raise DataError(
            f"{where}: {len(columns)} label columns ({shown_names(columns)}) are one 0/1 column per label, "
            "which is multi-label; pass --task multi-label, or name one column with --label-field"
        )
    return _classes(where, rows, name, note)


def _at(where: str, line: int | str) -> str:
    """Where a row is: its file and line (tensors: ``sample N``)."""
    return f"{where}, line {line}" if isinstance(line, int) else f"{where}, {line}"


def _as_number_text(label: Any) -> str | None:
    """A label as the text of a number (JSON numbers too), or None for lists and other values."""
    if isinstance(label, bool) or not isinstance(label, (str, int, float)):
        return None
    return label if isinstance(label, str) else repr(label)


_JSON_KINDS = {float: "number", bool: "boolean", type(None): "null", dict: "object"}


def _class_text(where: str, line: int, name: str, label: Any) -> str:
    """One class label as text (Unicode NFC): a string or a whole JSON number; anything else,
    and a name with a newline or escape code, refused by line."""
    if isinstance(label, list):
        raise DataError(
            f"{_at(where, line)}: {name!r} is a list, and the task is classification: pass --task multi-label "
            "for several labels per sample"
        )
    if isinstance(label, float) or isinstance(label, bool) or not isinstance(label, (str, int)):
        kind = _JSON_KINDS.get(type(label), type(label).__name__)
        raise DataError(
            f'{_at(where, line)}: "{name}" must be a class name (string) or class index (integer), got a JSON '
            f"{kind}; pass --task regression for numbers"
        )
    text = unicodedata.normalize("NFC", str(label).strip())  # "café" typed or decomposed is one class
    if not text:
        raise DataError(f"{_at(where, line)}: the label {name!r} is empty; every row needs its class")
    if unprintable_name([text]) is not None and not _CLASS_INDEX.fullmatch(text):  # long digits: said as an index
        raise DataError(f"{_at(where, line)}: the label {name!r} is {text[:40]!r}: {NAME_RULE}")
    if is_number(text) and not math.isfinite(float(text)):
        raise DataError(
            f"{_at(where, line)}: {number_problem(text)}, a missing value rather than a class; fill it in or "
            "drop the row"
        )
    return text


def _classes(where: str, rows: Sequence[Row], name: str, note: str) -> Targets:
    """Classes: whole numbers are class indices as they are (below `MAX_CLASS_INDEX`), names are
    numbered in sorted order; at least two classes."""
    labels = [_class_text(where, line, name, label) for line, label in rows]
    _warn_merged_spellings(where, name, [label for _, label in rows], labels)
    hint = ""
    if all(_CLASS_INDEX.fullmatch(label) for label in labels):
        indices = []
        for (line, _), label in zip(rows, labels):
            index = class_index(label, MAX_CLASS_INDEX)  # digits bounded before they are converted
            if index is None:
                raise DataError(
                    f"{_at(where, line)}: label {label[:40]}; integer labels are class indices 0, 1, ... "
                    f"(below {MAX_CLASS_INDEX}): renumber them or use class names, or pass --task regression for values"
                )
            indices.append(index)
        names = [str(i) for i in range(max(indices) + 1)]
        if min(indices) > 0:
            hint = " (integer labels are class indices from 0: subtract 1 if yours start at 1)"
    else:
        names = check_class_names(where, sorted(set(labels)), "labels")
        number = {label: i for i, label in enumerate(names)}
        indices = [number[label] for label in labels]
    values = torch.tensor(indices, dtype=torch.long)
    counts = class_counts(values, names)
    check_classes(where, counts, "add rows of the other classes", hint)
    return Targets("classification", values, names, counts, None, note)


def _warn_merged_spellings(where: str, name: str, raw: Sequence[Any], names: Sequence[str]) -> None:
    """Warn when two spellings of a label became one class by Unicode normalisation (NFC and
    NFD "café" print alike: two classes of them would be a silent split)."""
    spellings: dict[str, set[str]] = {}
    for label, text in zip(raw, names):
        spellings.setdefault(text, set()).add(str(label).strip())
    merged = next((text for text, forms in spellings.items() if len(forms) > 1), None)
    if merged is not None:
        forms = ", ".join(ascii(form) for form in sorted(spellings[merged]))
        warnings.warn(
            f"{where}: the {name!r} labels {forms} are one name in different Unicode forms; trained as one class "
            f"{merged!r} (NFC)",
            stacklevel=4,
        )


def _regression(where: str, rows: Sequence[Row], name: str, note: str) -> Targets:
    """Finite numbers that vary (float64: 1.7e9 + 10 i keeps its last digit); their mean and
    std standardise them for training."""
    values = []
    for line, label in rows:
        text = _as_number_text(label)
        value = finite_number(text) if text is not None else None
        if value is None:
            why = (
                number_problem(text) if text is not None and is_number(text) else f"{str(label)[:40]!r} is not a number"
            )
            raise DataError(
                f"{_at(where, line)}: the label {name!r}: {why}; a regression target needs finite numbers: fix or "
                "drop the row, or pass --task classification"
            )
        values.append(value)
    if len(values) < 2 or len(set(values)) == 1:
        raise DataError(f"{where}: every {name!r} value is {values[0]:g}; a regression target must vary")
    target = {"name": name, "mean": statistics.fmean(values), "std": statistics.stdev(values)}
    return Targets("regression", torch.tensor(values, dtype=torch.float64), None, None, target, note)


def _tags(where: str, line: int, name: str, label: Any, delimiter: str) -> list[str]:
    """One sample's tags: a JSON list of names, or a field of names split at ``delimiter``."""
    if isinstance(label, list):
        if not all(isinstance(tag, (str, int)) and not isinstance(tag, bool) for tag in label):
            raise DataError(f"{_at(where, line)}: {name!r} must be a list of label names (strings), got {label!r:.60}")
        return [unicodedata.normalize("NFC", str(tag).strip()) for tag in label if str(tag).strip()]
    if not isinstance(label, (str, int)) or isinstance(label, bool):
        raise DataError(f"{_at(where, line)}: {name!r} must be a list of label names or a string of tags")
    tags = [unicodedata.normalize("NFC", tag.strip()) for tag in str(label).split(delimiter or None)]
    tags = [tag for tag in tags if tag]
    if not tags:
        raise DataError(
            f"{_at(where, line)}: the label {name!r} is empty; every row needs at least one tag (a sample "
            "without tags: one 0/1 column per label, or [] in JSON lines)"
        )
    return tags


def _multi_label(
    where: str, rows: Sequence[Row], name: str, delimiter: str, columns: Sequence[str] | None, note: str
) -> Targets:
    """A multi-hot target per sample, over the sorted tag names or the 0/1 columns."""
    if columns is not None:
        names = check_class_names(where, list(columns), "label columns")
        hot = [[_zero_one(where, line, column, v) for column, v in zip(columns, label)] for line, label in rows]
        values = torch.tensor(hot, dtype=torch.float32)
    else:
        tags = [_tags(where, line, name, label, delimiter) for line, label in rows]
        names = check_class_names(where, sorted({tag for row in tags for tag in row}), "labels")
        if not names:
            raise DataError(f"{where}: no row has a label; multi-label data needs labels")
        number = {tag: i for i, tag in enumerate(names)}
        values = torch.zeros(len(rows), len(names))
        for i, row in enumerate(tags):
            values[i, [number[tag] for tag in row]] = 1.0
    counts = dict(zip(names, values.sum(0).long().tolist()))
    check_labels(where, counts, len(rows))
    return Targets("multi-label", values, names, counts, None, note)


def _zero_one(where: str, line: int, column: str, value: Any) -> float:
    """A 0/1 label column's value (also JSON true/false)."""
    text = str(value).strip().lower()
    if text in ("0", "1", "0.0", "1.0", "true", "false"):
        return 1.0 if text in ("1", "1.0", "true") else 0.0
    raise DataError(
        f"{_at(where, line)}: the label column {column!r} holds {str(value)[:40]!r}; one column per label holds 0 or 1"
    )


def warn_conflicts(
    where: str, what: str, keys: Sequence[str], rows: Sequence[Row], values: torch.Tensor,
    shown: Sequence[str] | None = None,
) -> int:  # fmt: skip
    """Warn, in one line, when an input (``what``: text, image, molecule; the same ``keys[i]``)
    is listed again with another target than the first time: the first such pair by lines and
    labels, and how many inputs there are. The same input with the same label stays silent.
    Returns the count."""
    first: dict[str, int] = {}
    conflicts: list[tuple[int, int]] = []
    for i, key in enumerate(keys):
        j = first.setdefault(key, i)
        if j != i and not torch.equal(values[i], values[j]):
            conflicts.append((j, i))
    if conflicts:
        j, i = conflicts[0]
        name = (shown or keys)[j]
        inputs = len({keys[i] for _, i in conflicts})
        warnings.warn(
            f"{where}: the {what} {name[:60]!r} is on line {rows[j][0]} labelled {_label(rows[j][1])} and on line "
            f"{rows[i][0]} labelled {_label(rows[i][1])} ({plural(inputs, 'input')} listed again with another "
            "label): the model trains on both (a class: fix the label or drop a row; replicates of a measured "
            "value: their mean is what it learns)",
            stacklevel=3,
        )
    return len(conflicts)


def _label(label: Any) -> str:
    """A label as a row held it, quoted and short."""
    return repr(label.strip() if isinstance(label, str) else label)[:60]
