"""Crafted data files cost linear time and give short errors: a header of 200,000 columns is
checked at once, and a hold-out that starves thousands of labels names ten of them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from zoo.errors import DataError
from zoo.training.data.source import DataSource
from zoo.training.data.text.text_rows import table_records


def test_a_huge_header_with_repeated_names_is_refused_quickly(tmp_path: Path) -> None:
    header = ",".join(f"c{i % 100_000}" for i in range(200_000))  # every name twice
    path = tmp_path / "metadata.csv"
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"line 1: the header names \['c0', .*'\.\.\.'\] more than once") as caught:
        table_records(path, header + "\n" + ",".join("1" * 200_000) + "\n")
    assert time.perf_counter() - start < 5 and len(str(caught.value)) < 500


def test_a_hold_out_that_starves_thousands_of_classes_names_ten(tmp_path: Path) -> None:
    names = [f"class{i}" for i in range(3000)]
    labels = torch.arange(3000).repeat_interleave(1)  # one sample each: every held-out one is starved
    source = DataSource(kind="tensors", description="t.pt", num_samples=3000, num_classes=3000,
                        class_names=names, make_subset=lambda s, t: s, labels=labels)  # fmt: skip
    with pytest.raises(DataError, match=r"and \d+ more, leaving none to train on") as caught:
        source.split(0.5, seed=0)
    assert len(str(caught.value)) < 2000
