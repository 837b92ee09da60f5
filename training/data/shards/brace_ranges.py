"""Brace patterns (``train-{000000..000031}.tar``) counted before they are expanded:
braceexpand makes a whole range at once (``itertools.product`` holds its inputs), so a range
of a billion names is memory spent before any limit applies; `brace_count` says how many names
a pattern makes in the time it takes to read it."""

from __future__ import annotations

import re

from braceexpand import braceexpand

MAX_NAMES = 100_000  # counts past this are reported as this + 1
_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")  # braceexpand's own patterns
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")


def brace_count(pattern: str, limit: int = MAX_NAMES) -> int:
    """How many names ``braceexpand(pattern)`` makes, counted without making them (capped at
    `limit` + 1): braceexpand's grammar of ranges ``{a..b..step}`` and lists ``{x,y}``."""
    total, start, depth, pos = 1, 0, 0, 0
    while pos < len(pattern) and total <= limit:
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            start = pos if depth == 0 else start
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                total *= _expression_count(pattern[start + 1 : pos], limit)
        pos += 1
    return min(total, limit + 1)


def _expression_count(expression: str, limit: int) -> int:
    """Names one ``{...}`` of a brace pattern stands for (a range, a list, or itself in braces)."""
    numbers = _INT_RANGE.match(expression)
    if numbers:
        if max(len(n or "") for n in numbers.groups()) > 20:
            return limit + 1  # (and int() refuses over 4,300 digits)
        first, last, step = (int(n) if n else 1 for n in numbers.groups())
        return abs(last - first) // (step or 1) + 1
    letters = _CHAR_RANGE.match(expression)
    if letters:
        return len(list(braceexpand("{" + expression + "}")))  # at most 52
    items, depth, start, pos = [], 0, 0, 0
    while pos < len(expression):
        char = expression[pos]
        if char == "\\":
            pos += 2
            continue
        depth += (char == "{") - (char == "}")
        if char == "," and depth == 0:
            items.append(expression[start:pos])
            start = pos + 1
        pos += 1
    if depth or not items:
        return brace_count(expression, limit)  # a literal {...}
    return sum(brace_count(item, limit) for item in [*items, expression[start:]])
