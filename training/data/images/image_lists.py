"""Image lists as a `DataSource`: a table naming each image and its label(s).

- a folder holding ``metadata.csv`` or ``metadata.jsonl`` (Hugging Face's ``imagefolder``
  convention): a ``file_name`` column, relative to the folder, and label columns;
- a Kaggle-style ``train.csv``/``.jsonl`` with a path column (``file_name``, ``image``,
  ``path``, ``filename``, ``file``, ``image_path``, ``image_name``, ``image_id``), relative to
  ``--images DIR`` or else to the table's folder; a name without an extension (Kaggle's
  ``train_0``) is the image of that name with an image extension (``train_0.jpg``; two such
  images, ``train_0.jpg`` and ``train_0.png``, are refused as ambiguous).

The label is the one other column, or the one ``--label-field`` names; several 0/1 columns
are one column per label (multi-label). Targets are read by `zoo.training.data.targets`
(classes, regression, multi-label). Every row is checked before any model is built: a path
that is empty, absolute, leads out of the folder (``..``, a link out), names no file or no
readable image is a `DataError` naming the table, the line and the field; the table's bytes,
its rows, each image's pixels (`zoo.loading.images.open_image`) and the names its messages echo
(a crafted header may be megabytes) are bounded."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path, PureWindowsPath
from typing import Any

from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from zoo.bounds import MAX_CLASS_NAME, unprintable_name
from zoo.errors import DataError, DataNotFoundError
from zoo.training.data.images.image_folders import ImageFiles, check_images
from zoo.training.data.molecules.molecule_files import first_names
from zoo.training.data.source import DataSource
from zoo.training.data.targets import read_targets, warn_conflicts
from zoo.training.data.text.text_rows import clipped, decode_text, json_type, plural, shown_names, table_records

METADATA_FILES = ("metadata.csv", "metadata.jsonl")
PATH_COLUMNS = ("file_name", "image", "path", "filename", "file", "image_path", "image_name", "image_id")
MAX_LIST_BYTES = 64 << 20  # a list is read whole: 64 MiB is some millions of rows
MAX_ROWS = 1_000_000
MAX_PATH_CHARS = 4096


def metadata_file(folder: Path) -> Path | None:
    """The ``metadata.csv``/``metadata.jsonl`` of an image-list folder (None: an image folder)."""
    found = [folder / name for name in METADATA_FILES if (folder / name).is_file()]
    if len(found) > 1:
        raise DataError(f"{folder} holds both {' and '.join(METADATA_FILES)}; keep the one that lists the images")
    return found[0] if found else None


def is_image_list(path: Path) -> bool:
    """A ``.csv``/``.jsonl`` whose first row names a path column and no ``text`` or ``smiles``."""
    if path.suffix.lower() not in (".csv", ".jsonl"):
        return False
    names = {name.strip().lower() for name in first_names(path) or []}
    return bool(names & set(PATH_COLUMNS)) and not names & {"text", "smiles"}


def image_list_source(
    table: Path, images: Path | None = None, label: str | None = None, task: str = "auto", delimiter: str = " "
) -> DataSource:
    """The images a table lists, relative to ``images`` (default: the table's folder), with the
    targets of the column ``label`` (default: the one other column, or the 0/1 columns)."""
    root = images if images is not None else table.parent
    if not root.is_dir():
        raise DataNotFoundError(f"{root} is not a folder; --images names the folder the list's paths are under")
    size = table.stat().st_size
    if size > MAX_LIST_BYTES:
        raise DataError(f"{table} is {size >> 20} MiB; an image list is read whole, up to {MAX_LIST_BYTES >> 20} MiB")
    columns, records = table_records(table, decode_text(table))
    if not records:
        raise DataError(f"{table} lists no images; expected one row per image (a header line, then the rows)")
    if len(records) > MAX_ROWS:
        raise DataError(f"{table} lists {len(records):,} images, more than {MAX_ROWS:,}; split the list")
    path_column = _path_column(table, columns)
    label_columns = _label_columns(table, columns, path_column, label, task, records)
    real_root = os.path.realpath(root)
    paths = [image_path(table, line, path_column, row.get(path_column), root, real_root) for line, row in records]
    if len(label_columns) == 1:
        rows = [(line, _value(table, line, row, label_columns[0])) for line, row in records]
    else:
        rows = [(line, [_value(table, line, row, c) for c in label_columns]) for line, row in records]
    name = label_columns[0] if len(label_columns) == 1 else "labels"
    targets = read_targets(str(table), rows, name, task, delimiter, label_columns if len(label_columns) > 1 else None)
    values = targets.values
    listed = [str(row.get(path_column)) for _, row in records]
    warn_conflicts(str(table), "image", [os.path.realpath(path) for path in paths], rows, values, listed)
    samples = [(path, values[i] if values.is_floating_point() else int(values[i])) for i, path in enumerate(paths)]
    in_chans, image_size = check_images(
        paths, lambda i: f"{table}, line {records[i][0]} ({path_column} {clipped(records[i][1][path_column])!r})"
    )

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return ImageFiles([samples[i] for i in indices], in_chans, transform, root=real_root)

    return DataSource(
        kind="images",
        description=f"image list {table} ({plural(len(samples), 'image')}, {targets.what})",
        num_samples=len(samples),
        make_subset=make_subset,
        in_chans=in_chans,
        image_size=image_size,
        task_note=targets.note,
        **targets.source_fields(),
    )


def _path_column(table: Path, columns: list[str]) -> str:
    """The column naming each image: the first of `PATH_COLUMNS` the header has (any case)."""
    lowered = {column.lower(): column for column in columns}
    found = next((lowered[name] for name in PATH_COLUMNS if name in lowered), None)
    if found is None:
        raise DataError(
            f"{table}, line 1: no column names the image files; the columns are {shown_names(columns)}: name the "
            f"one that holds each image's path file_name (or one of {', '.join(PATH_COLUMNS[1:])})"
        )
    return found


def _label_columns(
    table: Path, columns: list[str], path_column: str, label: str | None, task: str, records: list[tuple[int, dict]]
) -> list[str]:
    """The label column(s): ``label`` (--label-field; any case), else the one other column, else
    (for multi-label or auto) the other columns when each holds only 0s and 1s."""
    others = [column for column in columns if column != path_column]
    if label is not None:
        match = [c for c in others if c == label] or [c for c in others if c.lower() == label.lower()]
        if not match:
            raise DataError(
                f"{table}: no column {clipped(label)!r} (--label-field); the label columns are {shown_names(others)}"
            )
        return _named(table, match[:1])
    if len(others) == 1:
        return _named(table, others)
    if not others:
        raise DataError(
            f"{table}, line 1: no label column besides {path_column!r}; add a column with each image's label(s) "
            "(the header names the columns)"
        )
    zero_one = all(
        str(row.get(c, "")).strip().lower() in ("0", "1", "true", "false") for _, row in records for c in others
    )
    if task in ("auto", "multi-label") and zero_one:
        return others  # each a label's name: `check_class_names` bounds them
    raise DataError(
        f"{table}: {plural(len(others), 'column')} besides {path_column!r} ({shown_names(others)}); name the "
        "label with --label-field (or give one 0/1 column per label for multi-label)"
    )


def _named(table: Path, columns: list[str]) -> list[str]:
    """The label column, its name checked: it names the target in messages, the config and the card."""
    if unprintable_name(columns) is not None:
        raise DataError(
            f"{table}, line 1: the label column {clipped(columns[0], 40)!r} ({len(columns[0]):,} characters) names "
            f"the target in messages and the model's config: it takes 1 to {MAX_CLASS_NAME} printable characters; "
            "rename it"
        )
    return columns


def _value(table: Path, line: int, row: dict[str, Any], column: str) -> Any:
    """A row's value in ``column``; a JSON line without it is refused by line."""
    if column not in row:
        raise DataError(f"{table}, line {line}: no {column!r}; the line has {shown_names(sorted(row))}")
    return row[column]


def _with_extension(path: Path, where: str) -> Path:
    """``path``, or for a name without an extension that names no file, the image of that name
    with one of torchvision's image extensions (``train_0`` -> ``train_0.jpg``); two such images
    (``train_0.jpg`` and ``train_0.png``) are refused by name: picking one would be a guess.
    A name given whole is what it says, whatever lies beside it."""
    if path.suffix or path.exists():
        return path
    found = [path.with_name(path.name + ext) for ext in IMG_EXTENSIONS if path.with_name(path.name + ext).is_file()]
    if len(found) > 1:
        named = " and ".join(str(candidate) for candidate in found[:2]) + (" (and more)" if len(found) > 2 else "")
        raise DataError(
            f"{where} names no file, and two images have that name with an extension, {named}: add the "
            "extension to say which one (or move the other away)"
        )
    return found[0] if found else path


def image_path(table: Path, line: int, column: str, value: Any, root: Path, real_root: str) -> str:
    """The path of the image a row names, inside ``root``: an empty, absolute or outward path
    (``..``, a link out of the folder) and a missing file are refused by line."""
    where = f"{table}, line {line}"
    if value is not None and not isinstance(value, str):  # JSON lines: {"file_name": 3}
        raise DataError(
            f"{where}: {column!r} is the JSON {json_type(value)} {clipped(json.dumps(value), 40)}; it must be a "
            f'string, the path of the image relative to {root}, in quotes (e.g. "{clipped(value, 40)}.jpg")'
        )
    if value is None or not value.strip():
        raise DataError(f"{where}: {column!r} is empty; every row names its image, relative to {root}")
    if len(value) > MAX_PATH_CHARS or "\x00" in value:
        raise DataError(f"{where}: {column!r} is not a file name ({len(value)} characters)")
    relative = Path(value)
    if relative.is_absolute() or PureWindowsPath(value).is_absolute() or PureWindowsPath(value).drive:
        raise DataError(f"{where}: {column!r} is the absolute path {value[:80]!r}; name images relative to {root}")
    if ".." in relative.parts or ".." in PureWindowsPath(value).parts:
        raise DataError(f"{where}: {column!r} {value[:80]!r} leads out of {root} (..); images must lie inside it")
    full = _with_extension(root / relative, f"{where}: {column!r} {value[:80]!r}")
    real = os.path.realpath(full)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise DataError(
            f"{where}: {column!r} {value[:80]!r} is a link that leads out of {root} (to {real}); copy the image in"
        )
    if not os.path.isfile(real):
        missing = "is not a regular file (a folder, a FIFO or a device)" if os.path.exists(real) else "does not exist"
        raise DataError(f"{where}: {column!r} {value[:80]!r}: {full} {missing}; fix the path or drop the row")
    return str(full)
