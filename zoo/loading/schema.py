"""The schema of a saved folder's ``config.json``: every field checked (types, lengths that
must agree, sizes within stated limits, names that stay inside their folder) before anything
is built from it, with one error naming the file and the field.

The limits bound what a crafted file can make zoo allocate: a model from a config is built
on the meta device and must match the weights file, but a model built without weights is
real, so its options are bounded here too.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from zoo.bounds import MAX_CLASS_NAME, NAME_RULE, TEXT_TOKENS, unprintable_name
from zoo.errors import WeightsError
from zoo.store import weight_entries

MAX_CLASSES = 100_000
MAX_SIDE = 4096  # pixels of a resize or crop side
MAX_OPTION_INT = 65_536  # any whole number among an architecture's options (in_chans, widths, depths...)
MAX_OPTION_ITEMS = 64  # items of a list option (dbn's sizes, out_indices...)
INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
CATEGORY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class _Refusal(Exception):
    """One field's problem, raised inside the checks and turned into a WeightsError naming the file."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r} {problem}")


def validate_saved_config(config: Any, path: Path) -> dict[str, Any]:
    """``config`` (parsed from ``path``) when it is a valid saved-model config; else a
    `WeightsError` that names the file and the field."""
    try:
        _check(config)
    except _Refusal as refusal:
        raise WeightsError(
            f"{path}: {refusal}; save the model again with zoo.save (the file was edited or was not written by zoo)"
        ) from None
    return config


def _check(config: Any) -> None:
    if not isinstance(config, dict):
        raise _Refusal("(top level)", f"must be a JSON object, not {type(config).__name__}")
    arch = _string(config, "architecture", required=True)
    if not weight_entries.is_registered(arch) or "." in arch:
        raise _Refusal("architecture", f"names no architecture zoo knows ({arch[:60]!r}); see `zoo list`")
    heads = weight_entries.supported_heads(arch)
    if _string(config, "head", required=True) not in heads:
        raise _Refusal("head", f"must be one of {', '.join(heads)}")
    num_classes = config.get("num_classes")
    if not _whole(num_classes) or not 0 <= num_classes <= MAX_CLASSES:
        raise _Refusal("num_classes", f"must be a whole number from 0 to {MAX_CLASSES}")
    _check_options(config.get("model_kwargs"))
    _check_preprocess(config.get("preprocess"))
    _check_classes(config, num_classes)
    for name in ("weights", "finetuned_from", "input_format"):
        _string(config, name, required=False)
    if config.get("label_field") is not None and unprintable_name([config["label_field"]]) is not None:
        raise _Refusal(
            "label_field",
            f"(the label column) must be a column name of 1 to {MAX_CLASS_NAME} printable characters, or null",
        )
    problem = None if config.get("max_length") is None else TEXT_TOKENS.problem(config["max_length"])
    if problem:
        raise _Refusal("max_length", f"(tokens kept per text) {problem}, or null")
    _check_target(config.get("target"), num_classes)
    _check_multi_label(config.get("multi_label"), num_classes, config.get("target"))
    if not isinstance(config.get("features_only", False), bool):
        raise _Refusal("features_only", "must be true or false")
    if config.get("features_only"):
        _int_list("out_indices", config.get("out_indices"), low=-MAX_OPTION_ITEMS, high=MAX_OPTION_ITEMS)


def _check_target(target: Any, num_classes: int) -> None:
    """A regression target: its name, the mean and std its standardisation used (finite, std > 0),
    and whether the model's outputs are still standardised (``standardised``: not folded). A
    head of several named outputs (``outputs``: one name each) has one mean and std for all, or
    a list of one per output."""
    if target is None:
        return
    if not isinstance(target, dict) or set(target) - {"name", "mean", "std", "standardised", "outputs"}:
        raise _Refusal("target", "must be an object with name, mean, std and (optionally) standardised and outputs")
    if not isinstance(target.get("standardised", False), bool):
        raise _Refusal("target.standardised", "must be true or false (whether the outputs are standardised)")
    outputs = target.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list) or not outputs or len(outputs) != num_classes:
            raise _Refusal("target.outputs", f"must be a list of num_classes={num_classes} output names (1 or more)")
        _check_names("target.outputs", outputs)
        if len(set(outputs)) != len(outputs):
            raise _Refusal("target.outputs", "names an output more than once")
    for stat in ("mean", "std"):
        value = target.get(stat)
        values = value if outputs is not None and isinstance(value, list) else [value]
        if outputs is not None and len(values) not in (1, num_classes):
            raise _Refusal(f"target.{stat}", f"must be a finite number or a list of num_classes={num_classes} of them")
        if not values or any(not _finite_number(v) for v in values):
            raise _Refusal(f"target.{stat}", "must be a finite number" + (" or a list of them" if outputs else ""))
        if stat == "std" and min(values) <= 0:
            raise _Refusal("target.std", "must be positive")
    name = target.get("name", "")
    if not isinstance(name, str) or len(name) > 256 or not name.isprintable():
        raise _Refusal("target.name", "must be a string of at most 256 printable characters (no newlines or escapes)")


def _finite_number(value: Any) -> bool:
    """A finite int or float (not a bool); an int too large for a float is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_multi_label(multi_label: Any, num_classes: int, target: Any) -> None:
    """A multi-label head: one name and one decision threshold (a probability) per output, in
    output order; the lengths are checked before the items are read."""
    if multi_label is None:
        return
    if not isinstance(multi_label, dict) or set(multi_label) != {"names", "thresholds"}:
        raise _Refusal("multi_label", "must be an object with names and thresholds (one of each per output)")
    if target is not None:
        raise _Refusal("multi_label", "and target cannot both be set: a head is multi-label or a regression")
    for field in ("names", "thresholds"):
        items = multi_label[field]
        if not isinstance(items, list) or len(items) != num_classes:
            size = len(items) if isinstance(items, list) else type(items).__name__
            raise _Refusal(f"multi_label.{field}", f"must be a list of num_classes={num_classes} items, got {size}")
    names = multi_label["names"]
    _check_names("multi_label.names", names)
    if len(set(names)) != len(names):
        raise _Refusal("multi_label.names", "names a label more than once")
    for i, value in enumerate(multi_label["thresholds"]):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise _Refusal(f"multi_label.thresholds[{i}]", "must be a probability from 0 to 1")


def _string(config: dict[str, Any], field: str, required: bool) -> str | None:
    value = config.get(field)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise _Refusal(field, "must be a non-empty string" + ("" if required else " or null"))
    return value


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_options(options: Any) -> None:
    if not isinstance(options, dict):
        raise _Refusal("model_kwargs", "must be an object of the architecture's options")
    for key, value in options.items():
        _check_option(f"model_kwargs.{key}", value, depth=0)


def _check_option(field: str, value: Any, depth: int) -> None:
    if value is None or isinstance(value, bool | str) and len(str(value)) <= 256:
        return
    if _whole(value):
        if abs(value) > MAX_OPTION_INT:
            raise _Refusal(field, f"is {value}: whole-number options are limited to {MAX_OPTION_INT}")
        return
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > 1e6:
            raise _Refusal(field, "must be a finite number of reasonable size")
        return
    if isinstance(value, list) and depth < 2 and len(value) <= MAX_OPTION_ITEMS:
        for i, item in enumerate(value):
            _check_option(f"{field}[{i}]", item, depth + 1)
        return
    raise _Refusal(field, "must be a number, a string, true/false, null or a short list of those")


def _int_list(field: str, value: Any, low: int, high: int) -> list[int]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_OPTION_ITEMS:
        raise _Refusal(field, f"must be a list of 1 to {MAX_OPTION_ITEMS} whole numbers")
    if not all(_whole(v) and low <= v <= high for v in value):
        raise _Refusal(field, f"must hold whole numbers from {low} to {high}")
    return value


def _check_preprocess(preprocess: Any) -> None:
    if preprocess is None or preprocess == {}:
        return
    if not isinstance(preprocess, dict):
        raise _Refusal("preprocess", "must be an object (mean, std, resize, crop, interpolation)")
    for stat in ("mean", "std"):
        values = preprocess.get(stat)
        if (
            not isinstance(values, list)
            or not 1 <= len(values) <= 4
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values)
        ):
            raise _Refusal(f"preprocess.{stat}", "must be a list of 1 to 4 finite numbers, one per channel")
    if len(preprocess["mean"]) != len(preprocess["std"]):
        raise _Refusal("preprocess.std", "must have as many values as preprocess.mean (one per channel)")
    if any(v <= 0 for v in preprocess["std"]):
        raise _Refusal("preprocess.std", "must be positive")
    for side in ("resize", "crop"):
        if side in preprocess:
            value = preprocess[side]
            sides = [value] if _whole(value) else value
            _int_list(f"preprocess.{side}", sides, low=1, high=MAX_SIDE)
            if len(sides) > 2:
                raise _Refusal(f"preprocess.{side}", "must be one side or [height, width]")
    if preprocess.get("interpolation", "bilinear") not in INTERPOLATIONS:
        raise _Refusal("preprocess.interpolation", f"must be one of {', '.join(INTERPOLATIONS)}")
    channels = preprocess.get("channels", len(preprocess["mean"]))
    if channels != len(preprocess["mean"]):
        raise _Refusal("preprocess.channels", "must equal the number of values in preprocess.mean")


def _check_classes(config: dict[str, Any], num_classes: int) -> None:
    categories = config.get("categories")
    if categories is not None and (
        not isinstance(categories, str) or not CATEGORY_NAME.fullmatch(categories) or ".." in categories
    ):
        raise _Refusal(
            "categories", "must name a class list shipped with zoo (letters, digits, '_', '.', '-'; no path)"
        )
    if categories is not None:
        _check_category_list(categories, num_classes)
    names = config.get("class_names")
    if names is None:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _Refusal("class_names", "must be a list of class names (strings)")
    if len(names) != num_classes:
        raise _Refusal("class_names", f"has {len(names)} names for num_classes={num_classes}")
    _check_names("class_names", names)


def _check_names(field: str, names: list[Any]) -> None:
    """Names that are printed (class and label names): the printable rule of `zoo.bounds`."""
    bad = unprintable_name(names)
    if bad is not None:
        shown = repr(names[bad])[:60] if isinstance(names[bad], str) else type(names[bad]).__name__
        raise _Refusal(f"{field}[{bad}]", f"is {shown}: {NAME_RULE}")


def _check_category_list(categories: str, num_classes: int) -> None:
    """A named class list is shipped with zoo and has one name per output of the head."""
    try:
        names = weight_entries.load_categories(categories)
    except WeightsError as error:
        raise _Refusal("categories", str(error).removeprefix(f"categories={categories!r} ")) from None
    if len(names) != num_classes:
        raise _Refusal(
            "categories",
            f"names {categories!r}, a list of {len(names)} classes, but num_classes is {num_classes}: "
            f"drop the field, or list the {num_classes} classes' names under 'class_names'",
        )
