"""The rows of a ``zoo predict --input`` file: a ``.csv`` (a header naming the column, csv's
strict rules) or ``.jsonl`` (one object a line) with a ``smiles``, ``text`` or ``file_name``
column, an ``id`` column kept when there is one; a ``.txt`` of one input a line, a ``.smi`` of one
SMILES a line, each with its name after whitespace if it has one (kept as the id);
or, for image models, a folder (its ``metadata.csv``/``metadata.jsonl``, else every image in
it). Bounded: the file's size, its rows and each field's length. A row that cannot be read (a
JSON line that is no object, a missing field, a field too long) keeps its place with an
``error``; a file that cannot be read at all (no such file, no column of the kind the model
reads, a quote never closed) is a `DataError` naming the file, the line and the fix."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import DataError, DataNotFoundError
from zoo.inference.items import IMAGE_SUFFIXES  # the one list: zoo.predict's folders too

MAX_INPUT_BYTES = 256 << 20  # a file of inputs read at once
MAX_ROWS = 1_000_000
MAX_FIELD_CHARS = 100_000  # one SMILES, text or path (SMILES are refused over 2,000 by the featurizer)
ID_COLUMN = "id"
COLUMNS = {  # the input column of each kind a model reads, in the order they are looked for
    "molecules": ("smiles",),
    "text": ("text",),
    "images": (
        "file_name",
        "image",
        "path",
        "filename",
        "file",
        "image_path",
        "image_name",
        "image_id",
    ),  # as image lists
}


@dataclass
class InputRow:
    """One input: where it is in the file (line, or position for a folder), its id when the
    file has an id column, the input itself, or why it could not be read."""

    line: int
    id: str | None
    value: str | None
    error: str | None = None
    path: str | None = None  # an image's path made whole (relative to the list's folder)


def read_inputs(path: Path, kind: str) -> list[InputRow]:
    """The rows of ``path`` for a model that reads ``kind`` (molecules, text or images); image
    paths are taken relative to the file's folder (the Hugging Face imagefolder convention)."""
    check_input_file(path)
    if path.is_dir():
        return _folder_rows(path, kind)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".txt", ".smi"):
        raise DataError(
            f"{path}: zoo predict --input reads .csv, .jsonl, .txt (one input a line) or .smi files{' or a folder of images' if kind == 'images' else ''}; "
            f"got {suffix or 'a file without a suffix'}"
        )
    text = _decoded(path)
    if suffix == ".csv":
        rows = _csv_rows(path, text, kind)
    elif suffix == ".jsonl":
        rows = _jsonl_rows(path, text, kind)
    elif suffix == ".smi" and kind == "molecules":  # Daylight's SMILES file: a SMILES, whitespace, the name if any
        rows = [InputRow(n, *_named(line.split(None, 1))) for n, line in _lines(text) if line.strip()]
        rows = rows[1:] if rows and rows[0].value.lower() == "smiles" else rows  # a header line (ZINC's files)
    else:
        rows = [InputRow(n, None, line.strip()) for n, line in _lines(text) if line.strip()]
    if not rows:
        raise DataError(f"{path} holds no inputs; expected one {_what(kind)} a row")
    if len(rows) > MAX_ROWS:
        raise DataError(f"{path} holds {len(rows):,} rows, more than the {MAX_ROWS:,} zoo predicts at once; split it")
    for row in rows:
        if row.error is None and row.value is not None and len(row.value) > MAX_FIELD_CHARS:
            row.value, row.error = None, f"the input is over {MAX_FIELD_CHARS:,} characters"
    if kind == "images":
        _resolve_images(path.parent, rows, path)
    return rows


def _named(fields: list[str]) -> tuple[str | None, str]:
    """(the name, cut to 256 characters as a column's id is, and the SMILES) of a .smi line split once at whitespace."""
    return (fields[1].strip()[:256] or None if len(fields) > 1 else None), fields[0]


def check_input_file(path: Path) -> None:
    """Before the model loads: the file (or folder) exists and is within `MAX_INPUT_BYTES`."""
    if path.is_dir():
        return
    if not path.exists():
        raise DataNotFoundError(f"{path} does not exist; --input takes a .csv, .jsonl or .txt file of inputs")
    if not path.is_file():
        raise DataError(f"{path} is not a file (a FIFO, a socket or a device); --input takes a file")
    size = path.stat().st_size
    if size > MAX_INPUT_BYTES:
        raise DataError(
            f"{path} is {size >> 20} MiB, over the {MAX_INPUT_BYTES >> 20} MiB zoo predict reads at once; split it"
        )


def _what(kind: str, many: bool = False) -> str:
    return {
        "molecules": "SMILES",
        "text": "texts" if many else "text",
        "images": "image paths" if many else "image path",
    }[kind]


def _decoded(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: the file is not UTF-8 text; save it as UTF-8") from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(io.StringIO(text, newline=""), start=1):
        yield number, line.rstrip("\r\n")


def _column(path: Path, names: list[str], kind: str, line: int) -> tuple[int | str, int | str | None]:
    """Where the input and the id are among ``names`` (a header's, or a JSON object's keys)."""
    lowered = [name.strip().lower() for name in names]
    found = next((c for c in COLUMNS[kind] if c in lowered), None)
    if found is None:
        wanted = " or ".join(repr(c) for c in COLUMNS[kind])
        raise DataError(
            f"{path}, line {line}: no {wanted} column (found {[n[:40] for n in names[:12]]}); the model reads "
            f"{_what(kind, many=True)}: name the column that holds them {COLUMNS[kind][0]!r}"
        )
    return lowered.index(found), (lowered.index(ID_COLUMN) if ID_COLUMN in lowered else None)


def _csv_rows(path: Path, text: str, kind: str) -> list[InputRow]:
    from zoo.training.data.text.text_rows import csv_fields

    rows: list[InputRow] = []
    header = None
    for start, fields in csv_fields(path, text):
        if not any(f.strip() for f in fields):
            continue
        if header is None:
            header = fields
            value_at, id_at = _column(path, header, kind, start)
            continue
        if len(fields) != len(header):
            rows.append(InputRow(start, None, None, f"{len(fields)} fields where the header has {len(header)}"))
        else:
            ident = fields[id_at].strip() if id_at is not None else None  # type: ignore[index]
            rows.append(_row(start, ident, fields[value_at]))  # type: ignore[index]
        if len(rows) > MAX_ROWS:
            break
    return rows


def _jsonl_rows(path: Path, text: str, kind: str) -> list[InputRow]:
    rows: list[InputRow] = []
    for number, line in _lines(text):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deep"
            rows.append(InputRow(number, None, None, f"not valid JSON ({reason})"))
            continue
        if not isinstance(item, dict):
            rows.append(InputRow(number, None, None, "not a JSON object"))
            continue
        value_key = next((k for k in item if k.strip().lower() in COLUMNS[kind]), None)
        id_key = next((k for k in item if k.strip().lower() == ID_COLUMN), None)
        ident = item.get(id_key) if id_key is not None else None
        ident = str(ident)[:256] if isinstance(ident, str | int) and not isinstance(ident, bool) else None
        if value_key is None:
            if not rows and number == _first_line(text):  # the first object sets the columns
                _column(path, list(item)[:12], kind, number)
            rows.append(InputRow(number, ident, None, f"no {COLUMNS[kind][0]!r} field"))
        elif not isinstance(item[value_key], str):
            rows.append(InputRow(number, ident, None, f"{value_key!r} is not a string"))
        else:
            rows.append(_row(number, ident, item[value_key]))
        if len(rows) > MAX_ROWS:
            break
    return rows


def _first_line(text: str) -> int:
    return next((n for n, line in _lines(text) if line.strip()), 0)


def _row(line: int, ident: str | None, value: str) -> InputRow:
    value = value.strip()
    if not value:
        return InputRow(line, ident, None, "the input is empty")
    return InputRow(line, ident, value)


def _folder_rows(folder: Path, kind: str) -> list[InputRow]:
    """A folder: its metadata.csv/.jsonl when it has one, else every image under it, sorted."""
    if kind != "images":
        raise DataError(
            f"{folder} is a folder; a model that reads {_what(kind, many=True)} takes a .csv, .jsonl or .txt file"
        )
    for name in ("metadata.csv", "metadata.jsonl"):
        if (folder / name).is_file():
            return read_inputs(folder / name, kind)
    found: list[str] = []
    for directory, subfolders, files in os.walk(folder):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for file in sorted(files):
            if file.lower().endswith(IMAGE_SUFFIXES) and not file.startswith("."):
                found.append(os.path.relpath(os.path.join(directory, file), folder))
        if len(found) > MAX_ROWS:
            raise DataError(f"{folder} holds over {MAX_ROWS:,} images; predict on part of it at a time")
    if not found:
        raise DataError(f"{folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    rows = [InputRow(i, None, path) for i, path in enumerate(sorted(found), start=1)]
    _resolve_images(folder, rows, folder)
    return rows


def _resolve_images(base: Path, rows: list[InputRow], listing: Path) -> None:
    """Each image's path made whole, relative to ``base`` (``value`` stays as written), by the
    rule of the training image lists: a name read from a file never leads out of its folder, so
    an absolute path, a ``..`` or a link out of it, or a name of no regular file is the row's
    ``error``, and the other rows go on."""
    from zoo.training.data.images.image_lists import image_path

    real_base = os.path.realpath(base)
    for row in rows:
        if row.value is None:
            continue
        try:
            row.path = image_path(listing, row.line, "image", row.value, base, real_base)
        except DataError as error:
            row.error = str(error).removeprefix(f"{listing}, line {row.line}: ")


__all__ = ["COLUMNS", "MAX_FIELD_CHARS", "MAX_INPUT_BYTES", "MAX_ROWS", "InputRow", "check_input_file", "read_inputs"]
