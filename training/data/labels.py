"""One reader of label values for every data file (text rows, molecules, shard labels): a
number is a regression target only when finite and within `MAX_TARGET`,
a class index is a whole number of bounded digits, anything else a class name. NaN, infinities
and numbers past the bound are said by the caller by line or key, never turned into classes."""

from __future__ import annotations

import math
import re
from collections import Counter

FLOAT32_MAX = 3.4028234663852886e38
# the largest regression target: a squared error of its size, summed over a million samples,
# stays inside float64, which the targets and the metrics (MAE, RMSE, R²) are kept in (the loss
# is on standardised targets)
MAX_TARGET = 1e150
MAX_NUMBER_CHARS = 100  # a numeric label longer than this is no label a person wrote
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)
_INDEX = re.compile(r"\d{1,18}")
# what spreadsheets and pandas' read_csv (chemprop's reader) write for a value nobody measured, lower-cased
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "-nan", "+nan", "null", "none", "#n/a", "#na", "<na>", "#n/a n/a"})


def is_missing_marker(text: str) -> bool:
    """Whether ``text`` is how tables spell a missing value (``NA``, ``N/A``, ``nan``, ``null``, empty...)."""
    return text.strip().lower() in MISSING_MARKERS


def is_number(text: str) -> bool:
    """Whether ``text`` spells a number (finite or not: ``nan``, ``inf`` and ``1e999`` do)."""
    text = text.strip()
    return len(text) <= MAX_NUMBER_CHARS and bool(_NUMBER.fullmatch(text))


def number_problem(text: str) -> str | None:
    """Why the number ``text`` cannot be a regression target (not finite, or beyond `MAX_TARGET`),
    or None when it can; ``text`` must be a number (`is_number`)."""
    value = float(text.strip())
    if math.isnan(value):
        return f"the label {text.strip()!r} is not a number (NaN)"
    if math.isinf(value):
        return f"the label {text.strip()[:40]!r} is infinite"
    if abs(value) > MAX_TARGET:
        return (
            f"the label {text.strip()[:40]!r} is beyond ±{MAX_TARGET:.0e}, where squared errors overflow the float64 "
            "that the metrics sum in; rescale the target (e.g. its log)"
        )
    return None


def finite_number(text: str) -> float | None:
    """``text`` as a regression target: a finite number within `MAX_TARGET`, or None."""
    return float(text) if is_number(text) and number_problem(text) is None else None


def class_index(text: str, limit: int) -> int | None:
    """``text`` as a class index from 0 to ``limit`` - 1 (digits only, bounded before they are
    converted), or None."""
    text = text.strip()
    if not _INDEX.fullmatch(text) or int(text) >= limit:
        return None
    return int(text)


def merged_spellings(labels: list[str]) -> list[str]:
    """``labels`` with each whole number written more than one way (``0`` and ``0.0``: a column
    saved partly through floats) as its most common spelling; a column of one spelling, and
    every other label, as it is (so the classes of a run trained before stay its names)."""
    spellings: dict[float, Counter[str]] = {}
    for label in labels:
        value = finite_number(label)
        if value is not None and value.is_integer():
            spellings.setdefault(value, Counter())[label] += 1
    chosen = {
        label: counts.most_common(1)[0][0] for counts in spellings.values() if len(counts) > 1 for label in counts
    }
    return [chosen.get(label, label) for label in labels]
