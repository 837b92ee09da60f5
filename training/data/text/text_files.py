"""Text files as a `DataSource`: ``text,label`` CSV with a header, or JSON lines
``{"text": ..., "label": ...}``, batched into byte-level tokens (`TextBatches`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from zoo.errors import DataError
from zoo.tokenizer import ByteTokenizer
from zoo.training.data.source import DataSource
from zoo.training.data.targets import read_targets, warn_conflicts
from zoo.training.data.text.text_rows import csv_rows, decode_text, jsonl_rows


class TextBatches:
    """Collate (text, target) rows into ``{"input_ids", "attention_mask", "labels"}`` with the
    byte-level tokenizer of zoo's language models (right padding, ``max_length`` tokens kept)."""

    def __init__(self, max_length: int) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_length = max_length

    def __call__(self, rows: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = self.tokenizer([text for text, _ in rows], max_length=self.max_length)
        labels = [label for _, label in rows]  # class indices (long), values (float64) or multi-hot rows (float)
        labels = (
            torch.tensor(labels, dtype=torch.float64)
            if labels and isinstance(labels[0], float)
            else torch.tensor(labels)
        )
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class _Rows(Dataset):
    """(text, target) rows in memory."""

    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.rows[index]


def text_source(
    path: Path, max_length: int, label: str = "label", task: str = "auto", delimiter: str = " "
) -> DataSource:
    """Texts and their targets under the column ``label`` (`zoo.training.data.targets`: string
    labels are classes numbered in sorted order, integer labels class indices as they are;
    numbers a regression, lists of tags a multi-label target, by ``task`` or the auto rule).
    Batches are byte-level tokens (`TextBatches`)."""
    text = decode_text(path)
    rows = jsonl_rows(path, text, label) if path.suffix.lower() == ".jsonl" else csv_rows(path, text, label)
    if not rows:
        raise DataError(f"{path} holds no rows; expected one (text, label) row per sample")
    labelled = [(line, value) for line, _, value in rows]
    targets = read_targets(str(path), labelled, label, task, delimiter)
    warn_conflicts(str(path), "text", [text for _, text, _ in rows], labelled, targets.values)
    values = targets.values.tolist()
    samples = [(value, target) for (_, value, _), target in zip(rows, values)]

    def make_subset(subset: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _Rows([samples[i] for i in subset])

    return DataSource(
        kind="text",
        description=f"text file {path} ({len(rows)} rows, {targets.what}, byte tokens)",
        num_samples=len(rows),
        make_subset=make_subset,
        collate_fn=TextBatches(max_length),
        task_note=targets.note,
        **targets.source_fields(),
    )
