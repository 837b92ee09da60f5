"""The rows of users' text,label files: ``.csv`` read with the csv module's strict rules and a
required header, ``.jsonl`` one JSON object a line; a malformed row raises `DataError` naming the
file, the line and the fix."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from zoo.errors import DataError

_NAMES_SHOWN = 10  # names listed in one error line
_NAME_CHARS = 60  # characters of one name echoed in an error line: a crafted header may be megabytes

TEXT_COLUMNS = ("text", "label")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith('s') else 's'}"


def clipped(name: Any, most: int = _NAME_CHARS) -> str:
    """A name (a column's, a value) for a message: its first ``most`` characters, then '...'."""
    text = str(name)
    return text if len(text) <= most else text[:most] + "..."


def shown_names(names: Sequence[Any], quoted: bool = True, most: int = _NAMES_SHOWN) -> str:
    """The first ``most`` names, each `clipped` (and quoted), then how many more: one error
    line stays short whatever a header holds."""
    shown = [repr(clipped(name)) if quoted else clipped(name) for name in names[:most]]
    more = f", and {len(names) - most} more" if len(names) > most else ""
    return (", " if quoted else ",").join(shown) + more


_CSV_EXAMPLE = 'the line `text,label` then rows such as `"great film, loved it",pos`'


def decode_text(path: Path) -> str:
    """The file as UTF-8 text (a leading BOM dropped); other encodings name the line."""
    data = path.read_bytes()
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # a BOM (utf-8-sig's offsets would not count it)
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: start + error.start]
        line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
        raise DataError(
            f"{path}, line {line}: byte {data[start + error.start]:#04x} is not UTF-8 text; save the file as UTF-8 "
            "(spreadsheets: 'CSV UTF-8')"
        ) from None


def _text_lines(text: str) -> Iterator[str]:
    """Lines split at \\n, \\r\\n or \\r (line numbers as editors count them), with trailing
    spaces and tabs dropped."""
    for line in io.StringIO(text, newline=""):
        body = line.rstrip("\r\n")
        yield body.rstrip(" \t") + line[len(body) :]


def csv_fields(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each non-blank row of a CSV text, by the csv module's strict rules
    (any field length); a malformed row is a `DataError` naming its lines and the fix."""
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))  # long texts are fine
    reader = csv.reader(_text_lines(text), strict=True)
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise _csv_error(path, start, reader.line_num, error) from None
        if fields:
            yield start, fields


def _csv_error(path: Path, start: int, end: int, error: csv.Error) -> DataError:
    reason = str(error)
    if "unexpected end of data" in reason:
        return DataError(
            f"{path}, line {start}: a quote opened on line {start} is never closed, so everything up to the end "
            f"of the file (line {end}) would be one text; close the quote, and double any quote inside a "
            'quoted text ("")'
        )
    if "expected after" in reason:
        where = f"line {end}" + (f" (in a quoted text opened on line {start})" if end != start else "")
        return DataError(
            f"{path}, {where}: a closing quote is followed by more text ({reason}); put the whole text in "
            'double quotes and double the quotes inside it, e.g. "she said ""hi""",pos'
        )
    return DataError(f"{path}, line {start}: not valid CSV ({reason})")


def csv_rows(path: Path, text: str, label: str = "label") -> list[tuple[int, str, str]]:
    """(line, text, label) of each row of a CSV with a header naming ``text`` and the column
    ``label`` (--label-field; other columns are ignored), parsed with the csv module's strict rules."""
    columns = ("text", label)
    header: list[str] | None = None
    rows: list[tuple[int, str, str]] = []
    for start, fields in csv_fields(path, text):
        if header is None:
            header = [name.strip() for name in fields]
            missing = [c for c in columns if c not in header]
            if missing:
                raise DataError(
                    f"{path}, line {start}: each row needs the fields ({shown_names(columns)}); missing "
                    f"[{shown_names(missing)}], found [{shown_names(header)}]: the first line must be a header naming "
                    f"the columns, e.g. {_CSV_EXAMPLE}"
                )
            twice = sorted({c for c in columns if header.count(c) > 1})
            if twice:
                raise DataError(f"{path}, line {start}: the header names {twice} more than once")
            text_at, label_at = header.index("text"), header.index(label)
            continue
        if len(fields) != len(header):
            columns = shown_names(header, quoted=False)
            if len(fields) > len(header):
                fix = 'a text holding a comma must be in double quotes, e.g. "great film, loved it",pos'
            elif len(fields) <= label_at:
                fix = "the row has no label"
            else:
                fix = "fill in every column"
            raise DataError(
                f"{path}, line {start}: {plural(len(fields), 'field')} where the header ({columns}) has "
                f"{len(header)}; {fix}"
            )
        label = fields[label_at].strip()
        if not label:
            raise DataError(f"{path}, line {start}: the label is empty; every row needs its class in the label column")
        if not fields[text_at].strip():
            raise DataError(f"{path}, line {start}: the text is empty; every row needs a text")
        rows.append((start, fields[text_at], label))
    if header is None:
        raise DataError(f"{path} is empty; expected a header line and one row per sample, e.g. {_CSV_EXAMPLE}")
    return rows


def jsonl_rows(path: Path, text: str, label: str = "label") -> list[tuple[int, str, Any]]:
    """(line, text, label) of each JSON object line, the label under the key ``label``
    (--label-field) as the line gives it: a string or a number (as text), a JSON number with a
    fraction or a list of tags kept as they are (`zoo.training.data.targets` reads them);
    blank lines are skipped."""
    columns = ("text", label)
    rows: list[tuple[int, str, Any]] = []
    for number, row in json_objects(path, text, '{"text": "great film", "label": "pos"}'):
        missing = [c for c in columns if c not in row]
        if missing:
            raise DataError(
                f"{path}, line {number}: each row needs the fields ({shown_names(columns)}); missing "
                f"[{shown_names(missing)}], found [{shown_names(sorted(row))}]"
            )
        value, found = row["text"], row[label]
        if not isinstance(value, str):
            raise DataError(f'{path}, line {number}: "text" must be a string, got a JSON {json_type(value)}')
        if isinstance(found, bool) or not isinstance(found, (str, int, float, list)):
            raise DataError(
                f'{path}, line {number}: "{label}" must be a class name (string) or class index (integer), got '
                f"a JSON {json_type(found)} (a number with a fraction is a regression's, a list a multi-label's)"
            )
        found = found if isinstance(found, (float, list)) else str(found).strip()
        if found == "":
            raise DataError(f"{path}, line {number}: the label is empty; every row needs its class")
        if not value.strip():
            raise DataError(f"{path}, line {number}: the text is empty; every row needs a text")
        rows.append((number, value, found))
    return rows


def json_type(value: Any) -> str:
    """A JSON value's kind as JSON names it, for messages: number, array, object, null..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(type(value), "value")


def table_records(path: Path, text: str) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """The columns and the (line, row) of each row of a table: a CSV with a header (the csv
    module's strict rules; every row as many fields as the header, values as text) or JSON
    lines (one object a line, values as JSON gives them; the columns are the first's keys);
    blank lines are skipped, a malformed row is a `DataError` naming its line."""
    if path.suffix.lower() == ".jsonl":
        return _jsonl_records(path, text)
    header: list[str] | None = None
    records: list[tuple[int, dict[str, Any]]] = []
    for start, fields in csv_fields(path, text):
        if header is None:
            header = [name.strip() for name in fields]
            twice = sorted(name[:40] for name, n in Counter(header).items() if n > 1)  # linear: headers can be long
            if twice or "" in header:
                shown = (twice or [""])[:_NAMES_SHOWN] + (["..."] if len(twice) > _NAMES_SHOWN else [])
                raise DataError(f"{path}, line {start}: the header names {shown} more than once or not at all")
            continue
        if len(fields) != len(header):
            raise DataError(
                f"{path}, line {start}: {plural(len(fields), 'field')} where the header "
                f"({shown_names(header, quoted=False)}) has {len(header)}; fill in every column, and put a value "
                "holding a comma in double quotes"
            )
        records.append((start, dict(zip(header, fields))))
    if header is None:
        raise DataError(f"{path} is empty; expected a header line naming the columns, then one row per sample")
    return header, records


def _jsonl_records(path: Path, text: str) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    records = list(json_objects(path, text))
    return (list(records[0][1]) if records else []), records


def json_objects(path: Path, text: str, example: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each non-blank line of JSON lines; a line that is not one JSON object
    (or is nested thousands deep) is a `DataError` naming it, and ``example`` when given."""
    such = f" such as {example}" if example else ""
    for number, line in enumerate(_text_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            raise DataError(
                f"{path}, line {number}: not valid JSON ({error.msg}, column {error.colno}); each line must be "
                f"one JSON object{such}"
            ) from None
        except RecursionError:  # a crafted line of arrays nested thousands deep
            raise DataError(f"{path}, line {number}: JSON nested too deep; each line must be one flat object") from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}, line {number}: a JSON {json_type(row)}, not an object; each line must be one{such}"
            )
        yield number, row
