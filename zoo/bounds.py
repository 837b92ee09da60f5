"""The values a numeric setting may take, declared once and checked twice: `Bounds` (finite,
between limits) makes the argparse ``type=`` of a command-line option, so a value out of range
stops the command when it is parsed (one line, exit 2), and `check_fields` checks the fields of
a dataclass against the bounds in their metadata (``field(metadata=bounded(...))``) for Python
callers (an `InvalidArgumentError` naming the field). Beside them, the two other values a
command checks before it starts, without importing torch: the defaults its ``--help`` shows
(`show_defaults`) and the CPU level ``ZOO_CPU_FEATURES`` names (`cpu_level`)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, NoReturn

from zoo.errors import InvalidArgumentError

INT_MAX = 2**31 - 1  # the largest count any setting takes (torch's and the data loaders' int32 sizes)
SEED_MAX = 2**32 - 1  # NumPy's seeds end here
MAX_CLASS_NAME = 256  # characters of one class or label name (it goes into messages, the config and the card)
NAME_RULE = f"a class name is 1 to {MAX_CLASS_NAME} printable characters (no newlines, tabs or escape codes)"


def unprintable_name(names: Any) -> int | None:
    """The index of the first of ``names`` that is not a string of 1 to `MAX_CLASS_NAME`
    printable characters (a newline or a terminal escape would forge or colour a line where it
    is printed), None when all are: the one rule for names read from data files and configs."""
    return next(
        (
            i
            for i, n in enumerate(names)
            if not isinstance(n, str) or not 0 < len(n) <= MAX_CLASS_NAME or not n.isprintable()
        ),
        None,
    )


@dataclass(frozen=True)
class Bounds:
    """A finite number from ``low`` to ``high`` (either may be None: unbounded; ``*_open``
    excludes the limit itself); ``integer`` numbers are whole (counts have ``high`` `INT_MAX`);
    ``words`` are taken besides the numbers (``("auto",)``: a value the program measures)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    words: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self._range() + "".join(f" or {word}" for word in self.words)

    def _range(self) -> str:
        low, high = _show(self.low), _show(self.high)
        if self.integer and self.low is not None and self.high in (None, INT_MAX):
            return f"{low} or more"
        if self.integer and self.low is not None:
            return f"from {low} to {high}"
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {low}"
        return f"{'<' if self.high_open else '<='} {high}" if self.high is not None else "finite"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed ("must be ..."), or None when it is."""
        if isinstance(value, str) and value in self.words:
            return None
        if self.integer and (isinstance(value, bool) or not isinstance(value, int)):
            return f"must be a whole number {self}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number {self}"
        if not math.isfinite(value):
            return f"must be a finite number {self}"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if above and self.integer and self.high == INT_MAX:
            return f"must be at most {INT_MAX}"
        return f"must be {self}" if below or above else None

    def parse(self, text: str) -> int | float | str:
        """The number ``text`` spells, when it is in range: an argparse ``type=`` function (its
        refusal is one line, ``argument --x: must be ..., got 'text'``, and exit 2); one of
        ``words`` is itself."""
        if text in self.words:
            return text
        try:
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:
            kind = "whole number" if self.integer else "number"
            raise argparse.ArgumentTypeError(f"must be a {kind} {self}, got {text!r}") from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
        return value

    def parse_list(self, text: str) -> list[int | float]:
        """The numbers ``text`` lists, separated by commas (``1,16``), each in range: an argparse
        ``type=`` function, as `parse`."""
        try:
            return [self.parse(part) for part in text.split(",")]
        except argparse.ArgumentTypeError:
            kind = "whole numbers" if self.integer else "numbers"
            raise argparse.ArgumentTypeError(f"must be {kind} {self} separated by commas, got {text!r}") from None


def count(low: int = 1, high: int = INT_MAX) -> Bounds:
    """Whole numbers from ``low`` (default 1) to ``high``."""
    return Bounds(low, high, integer=True)


def bounded(bounds: Bounds) -> dict[str, Any]:
    """A field's metadata giving it ``bounds`` (see `check_fields`)."""
    return {"bounds": bounds}


def check_fields(instance: Any, owner: str | None = None, flags: dict[str, str] | None = None) -> None:
    """Refuse a field of dataclass ``instance`` outside the bounds in its metadata (None passes
    for a field whose default is None): an `InvalidArgumentError` naming ``owner.field`` (and its
    command-line flag, from ``flags``)."""
    owner = owner or type(instance).__name__
    for f in dataclasses.fields(instance):
        bounds = f.metadata.get("bounds")
        value = getattr(instance, f.name)
        if bounds is None or (value is None and f.default is None):
            continue
        problem = bounds.problem(value)
        if problem:
            raise InvalidArgumentError(f"{field_name(owner, f.name, flags)} {problem}, got {value!r}")


def field_name(owner: str, name: str, flags: dict[str, str] | None = None) -> str:
    """``owner.name``, with its command-line flag when it has one: ``TrainConfig.lr (--lr)``."""
    flag = (flags or {}).get(name)
    return f"{owner}.{name}" + (f" ({flag})" if flag else "")


def _show(limit: float | None) -> str:
    """A limit as the user would type it (1 rather than 1.0)."""
    return str(int(limit)) if limit is not None and float(limit).is_integer() else str(limit)


# Sampling a language model's continuation: `zoo generate`'s options and `zoo serve`'s request fields
TEMPERATURE = Bounds(0, 100)  # 0: greedy; far above 1 every byte is about as likely
TOP_P = Bounds(0, 1, low_open=True)  # nucleus sampling's probability mass
TOP_K = count(1, 1_000_000)  # also the classes a top-k answer may ask for (a head has at most 1,000,000)
SEED = count(0, SEED_MAX)  # torch's CPU generator keeps 32 bits of a seed: more would repeat texts
WORKERS = count(0, 256)  # data-loading processes (--num-workers) at most
TEXT_TOKENS = count(1, 1 << 20)  # tokens kept per text row (zoo finetune --max-length, a text model's max_length)


NO_DEFAULT = (None, False, argparse.SUPPRESS)  # what `show_defaults` leaves unsaid


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Say each option's default in ``parser``'s help, as ``(default: X)``: not for switches
    that are off, options without one (None) or help that already names its default."""
    for action in parser._actions:
        default, text = action.default, action.help
        if not action.option_strings or text == argparse.SUPPRESS or any(default is v for v in NO_DEFAULT):
            continue
        if text is not None and "default" in text:
            continue
        shown = f"(default: {default:g})" if isinstance(default, float) else "(default: %(default)s)"
        action.help = f"{text} {shown}" if text else shown


CPU_FEATURES_ENV = "ZOO_CPU_FEATURES"
CPU_LEVELS = ("avx2", "avx512", "avx512_bf16", "amx")  # what `zoo.devices.cpu_features` can be told the CPU is


def cpu_level() -> str | None:
    """The CPU level `CPU_FEATURES_ENV` names (None when it is unset), refused when zoo does not
    know it; read without torch, so that the command line checks it before any work."""
    level = os.environ.get(CPU_FEATURES_ENV, "").strip().lower()
    if level and level not in CPU_LEVELS:
        raise InvalidArgumentError(
            f"{CPU_FEATURES_ENV}={level!r} is not a CPU level zoo knows: use one of {', '.join(CPU_LEVELS)}, "
            "or leave it unset for this CPU's own"
        )
    return level or None


class _OldSpelling(argparse.Action):
    """A flag's old spelling (``--topk`` for ``--top-k``): hidden from ``--help``, it sets what
    the new flag sets and says in one line, as a warning, that it is deprecated and which flag
    replaces it."""

    def __init__(self, option_strings: list[str], dest: str, new: argparse.Action, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=None if not new.option_strings else new.nargs,  # a positional's old flag takes one value
            const=new.const,
            type=new.type,
            choices=new.choices,
            default=argparse.SUPPRESS,
            metavar=new.metavar,
            help=argparse.SUPPRESS,
        )
        self.new = new

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        flag = self.new.option_strings[0] if self.new.option_strings else (self.new.metavar or self.new.dest).upper()
        warnings.warn(f"{option_string} is deprecated and will go: use {flag}", FutureWarning, stacklevel=2)
        self.new(parser, namespace, values, flag)


def add_renamed(group: Any, old: str, new: argparse.Action) -> None:
    """Add ``old`` to ``group`` as the deprecated, hidden spelling of the option ``new``
    (what ``add_argument`` returned): one name per meaning across the commands, the old ones
    still working (`tests/test_cli_flags.py` checks both)."""
    group.add_argument(old, dest=new.dest, action=_OldSpelling, new=new)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, saying a refused option in one line (``zoo predict: error: ...``),
    without the usage block: the house rule for every error of the command line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
