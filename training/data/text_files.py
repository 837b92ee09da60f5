"""Text files as a `DataSource`: ``text,label`` CSV with a header, or JSON lines
``{"text": ..., "label": ...}``, batched into byte-level tokens (`TextBatches`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from zoo.errors import DataError
from zoo.tokenizer import ByteTokenizer
from zoo.training.data.labels import class_index, is_number, number_problem
from zoo.training.data.source import MAX_CLASS_INDEX, DataSource, check_class_names, check_classes, class_counts
from zoo.training.data.text_rows import csv_rows, decode_text, jsonl_rows

_CLASS_INDEX = re.compile(r"-?[0-9]+")


class TextBatches:
    """Collate (text, label) rows into ``{"input_ids", "attention_mask", "labels"}`` with the
    byte-level tokenizer of zoo's language models (right padding, ``max_length`` tokens kept)."""

    def __init__(self, max_length: int) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_length = max_length

    def __call__(self, rows: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = self.tokenizer([text for text, _ in rows], max_length=self.max_length)
        labels = torch.tensor([label for _, label in rows], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class _Rows(Dataset):
    """(text, class index) rows in memory."""

    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.rows[index]


def _check_numbers(path: Path, rows: list[tuple[int, str, str]]) -> None:
    """Refuse a NaN or infinite label by line: a missing value, not a class."""
    for line, _, label in rows:
        if is_number(label) and not math.isfinite(float(label)):
            raise DataError(
                f"{path}, line {line}: {number_problem(label)}, a missing value rather than a class; fill it in or "
                "drop the row"
            )


def text_source(path: Path, max_length: int) -> DataSource:
    """Texts and class indices; string labels are numbered in sorted order, integer labels
    (all of them digits) are class indices as they are. Batches are byte-level tokens
    (`TextBatches`)."""
    text = decode_text(path)
    rows = jsonl_rows(path, text) if path.suffix.lower() == ".jsonl" else csv_rows(path, text)
    if not rows:
        raise DataError(f"{path} holds no rows; expected one (text, label) row per sample")
    labels = [label for _, _, label in rows]
    _check_numbers(path, rows)
    hint = ""
    if all(_CLASS_INDEX.fullmatch(label) for label in labels):
        indices = []
        for line, _, label in rows:
            index = class_index(label, MAX_CLASS_INDEX)  # digits bounded before they are converted
            if index is None:
                raise DataError(
                    f"{path}, line {line}: label {label[:40]}; integer labels are class indices 0, 1, ... "
                    f"(below {MAX_CLASS_INDEX}): renumber them or use class names"
                )
            indices.append(index)
        class_names = [str(i) for i in range(max(indices) + 1)]
        if min(indices) > 0:
            hint = " (integer labels are class indices from 0: subtract 1 if yours start at 1)"
    else:
        class_names = check_class_names(str(path), sorted(set(labels)), "labels")
        number = {name: i for i, name in enumerate(class_names)}
        indices = [number[label] for label in labels]
    targets = torch.tensor(indices, dtype=torch.long)
    counts = class_counts(targets, class_names)
    check_classes(str(path), counts, "add rows of the other classes", hint)
    samples = [(value, index) for (_, value, _), index in zip(rows, indices)]

    def make_subset(subset: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _Rows([samples[i] for i in subset])

    return DataSource(
        kind="text",
        description=f"text file {path} ({len(rows)} rows, {len(class_names)} classes, byte tokens)",
        num_samples=len(rows),
        num_classes=len(class_names),
        class_names=class_names,
        make_subset=make_subset,
        collate_fn=TextBatches(max_length),
        class_counts=counts,
        labels=targets,
    )
