"""``zoo predict NAME --input FILE``: every row of a file of SMILES, texts or image paths
(`zoo.cli.input_rows`) through the model, in batches, out as JSON lines or CSV in the input's
order, each with its line (and id, when the file has an id column). The rows go through the
one predictor (`zoo.inference.Predictor`: its checks, its images decoded by ``--num-workers``
processes), and the answer is the one it gives ``zoo serve`` too: the top-k classes, a
regression's value in the target's units, or every label over its threshold. A row that cannot
be predicted (a bad SMILES, a missing image) gets an ``error`` and the others go on; the count
goes to stderr."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from zoo.cli.input_rows import COLUMNS, InputRow, check_input_file, read_inputs
from zoo.errors import DataError, InvalidArgumentError, ZooError
from zoo.inference import Predictor
from zoo.loading.outputs import OutputMeaning
from zoo.store.download import weight_folders
from zoo.store.files import atomic_path, check_output

FORMATS = ("csv", "jsonl")


def predict_file(args: argparse.Namespace) -> int:
    """Run ``zoo predict NAME --input FILE`` (see the module docstring)."""
    path = Path(args.input).expanduser()
    check_input_file(path)  # before the model loads
    form = output_format(args.format, args.out)
    lists = [path / name for name in ("metadata.csv", "metadata.jsonl")] if path.is_dir() else [path]
    if args.out:  # not the input, nor a file of the input folder or the run folder NAME
        folders = [p for p in (path, Path(args.name), *weight_folders()) if p.is_dir()]
        check_output(Path(args.out).expanduser(), lists, folders)
    workers = getattr(args, "num_workers", 0)  # a Namespace made in Python may leave it out
    predictor = Predictor(args.name, device=args.device, batch_size=args.batch_size, num_workers=workers)
    kind = model_input(predictor, args.name)
    rows = read_inputs(path, kind)
    if args.out:  # nor a listed image
        check_output(Path(args.out).expanduser(), [row.path for row in rows])
    top_k = min(args.top_k, predictor.model.pretrained_cfg.get("num_classes") or args.top_k)
    with _opened(args.out) as stream:
        write = _writer(form, stream, predictor.meaning, top_k, any(row.id is not None for row in rows))
        quiet = args.no_progress or len(rows) <= args.batch_size
        bar = tqdm(total=len(rows), desc="zoo predict", unit="row", leave=False, disable=quiet)
        try:
            for row, answer in answered(predictor, rows, top_k):
                write(row, answer)
                bar.update(1)
        finally:
            bar.close()
        _check_some_predicted(path, rows)  # else nothing is written: an --out file there stays as it was
    return _summary(path, rows, args.out)


def output_format(given: str | None, out: str | None) -> str:
    """--format, else the --out file's suffix (.csv or .jsonl), else JSON lines; a --format
    that the --out file's suffix contradicts (CSV into ``x.jsonl``) is refused."""
    suffix = Path(out).suffix.lower().lstrip(".") if out else ""
    if given and suffix in FORMATS and suffix != given:
        raise InvalidArgumentError(
            f"--format {given} and --out {out} disagree: its suffix says {suffix}; name a .{given} file or drop --format"
        )
    return given or (suffix if suffix in FORMATS else "jsonl")


def model_input(predictor: Predictor, name: str) -> str:
    """What a model's --input rows hold (molecules, text or images), refusing other models by name
    (`Predictor` refuses a model that predicts nothing)."""
    if predictor.kind not in COLUMNS:
        raise InvalidArgumentError(
            f"{name} reads {predictor.kind}; zoo predict --input takes models of images, texts or SMILES"
        )
    return predictor.kind


_ROW_NAMES = {"text": "the text", "molecules": ""}


def answered(predictor: Predictor, rows: list[InputRow], top_k: int) -> Iterator[tuple[InputRow, Answer]]:
    """Each row with its answer (None for a row that cannot be predicted: its ``error`` says why),
    in the rows' order; the readable rows go through the predictor a batch at a time (images
    decoded by its worker processes), a row it refuses gets the refusal as its error."""
    readable = [row for row in rows if row.error is None]
    items = [row.path if predictor.kind == "images" else row.value for row in readable]
    # a refusal names an image as the file wrote it; the row's line and input stand beside it
    names = [(row.value or "") if predictor.kind == "images" else _ROW_NAMES[predictor.kind] for row in readable]
    waiting = iter(rows)
    done = 0
    for chunk in predictor.chunks(items, names):
        batch_rows, done = readable[done : done + len(chunk)], done + len(chunk)
        for row, sample in zip(batch_rows, chunk):
            if isinstance(sample, ZooError):
                row.error = str(sample)
        samples = [sample for sample in chunk if not isinstance(sample, ZooError)]
        outputs = predictor.forward(predictor.collate(samples)) if samples else None
        answers = iter(predictor.answers(outputs, top_k) if outputs is not None else [])
        given = {id(row): next(answers) for row in batch_rows if row.error is None}
        for row in waiting:  # the rows up to this batch's last, those refused by the file's reading included
            yield row, given.get(id(row))
            if batch_rows and row is batch_rows[-1]:
                break
    for row in waiting:  # refused rows after the last readable one
        yield row, None


@contextlib.contextmanager
def _opened(out: str | None) -> Iterator[IO[str]]:
    if out is None:
        yield sys.stdout
        return
    with atomic_path(out) as part, open(part, "w", encoding="utf-8", newline="") as stream:
        yield stream  # out is replaced only when every row is written


Answer = dict[str, Any] | None
Write = Callable[[InputRow, Answer], None]


def _writer(form: str, stream: IO[str], meaning: OutputMeaning, top_k: int, ids: bool) -> Write:
    """A function that writes one row's answer (or its error) to ``stream`` as ``form`` says."""
    if form == "jsonl":

        def write_json(row: InputRow, answer: dict[str, Any] | None) -> None:
            head = {"line": row.line, **({"id": row.id} if ids else {}), "input": row.value}
            stream.write(strict_json({**head, **(answer or {"error": row.error})}, ensure_ascii=False) + "\n")

        return write_json
    columns = csv_columns(meaning, top_k)
    table = csv.writer(stream)
    table.writerow(["line", *(["id"] if ids else []), "input", *columns, "error"])

    def write_csv(row: InputRow, answer: dict[str, Any] | None) -> None:
        cells = csv_cells(answer, len(columns)) if answer is not None else [""] * len(columns)
        cells = [row.line, *([row.id or ""] if ids else []), row.value or "", *cells, row.error or ""]
        table.writerow([spreadsheet_safe(cell) for cell in cells])

    return write_csv


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula (it starts with =, +, -, @, a tab or
    a carriage return: an input, id, label or error taken from the user's file) behind a ``'``,
    as OWASP advises for CSV; numbers, negative ones included, stay as they are."""
    if not isinstance(cell, str) or not cell.startswith(_FORMULA_START):
        return cell
    try:
        float(cell)
    except ValueError:
        return "'" + cell
    return cell


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (inf, -inf, nan) as None, in dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def strict_json(value: Any, **options: Any) -> str:
    """``value`` as standard JSON: a non-finite number (``Infinity``, ``NaN``, which JSON has not) is null."""
    return json.dumps(finite(value), allow_nan=False, **options)


def csv_columns(meaning: OutputMeaning, top_k: int) -> list[str]:
    """The answer's CSV columns: label_1, score_1... (classes), value, or labels and scores."""
    if meaning.task == "regression":
        return meaning.output_names or ["value"]  # a column per named output
    if meaning.task == "multi_label":
        return ["labels", "scores"]
    return [f"{column}_{i}" for i in range(1, top_k + 1) for column in ("label", "score")]


def csv_cells(answer: dict[str, Any], width: int) -> list[str]:
    """One answer as CSV cells: multi-label names and their scores as JSON lists (a label may hold
    a space, or any delimiter)."""
    if "value" in answer:
        value = answer["value"]
        if "outputs" in answer:
            return [repr(v) for v in value]
        return [" ".join(map(repr, value)) if isinstance(value, list) else repr(value)]  # every digit (1.7e9 + 10 i)
    if "labels" in answer:
        found = answer["labels"]
        names = [item["label"] for item in found]
        return [json.dumps(names, ensure_ascii=False), strict_json([round(item["score"], 4) for item in found])]
    cells = [cell for item in answer["classes"] for cell in (item["label"], f"{item['score']:.4f}")]
    return cells + [""] * (width - len(cells))


def answer_lines(shown: str, answer: dict[str, Any], with_index: bool = True) -> list[str]:
    """One input's answer as ``zoo predict`` prints it: the input, then its top classes or the
    labels over their thresholds (percent, name, index) a line each; a value on the input's line."""
    if "value" in answer:
        value, target = answer["value"], answer.get("target")
        if "outputs" in answer:  # named outputs (a descriptor backbone's): a line each
            return [
                f"{shown}{f' ({target})' if target else ''}",
                *(f"  {v:.6g}\t{n}" for n, v in zip(answer["outputs"], value)),
            ]
        text = " ".join(f"{v:.10g}" for v in value) if isinstance(value, list) else f"{value:.10g}"
        return [f"{shown}\t{text}{f' ({target})' if target else ''}"]
    found = answer.get("classes", answer.get("labels", []))
    index = (lambda item: f" ({item['index']})") if with_index else (lambda item: "")  # noqa: E731
    return [shown, *(f"  {item['score']:7.2%}  {item['label']}{index(item)}" for item in found)]


def _check_some_predicted(path: Path, rows: list[InputRow]) -> None:
    """None of the rows predicted is an error."""
    failed = [row for row in rows if row.error is not None]
    if failed and len(failed) == len(rows):
        raise DataError(
            f"{path}: none of its {len(rows)} rows could be predicted (line {failed[0].line}: {failed[0].error}); "
            "check that the file holds what the model reads"
        )


def _summary(path: Path, rows: list[InputRow], out: str | None) -> int:
    """The count of rows not predicted on stderr."""
    failed = [row for row in rows if row.error is not None]
    where = f" in {out}" if out else ""
    if failed:
        first = failed[0]
        print(
            f"zoo predict: {len(failed)} of {len(rows)} rows not predicted (their error field{where} says why; "
            f"the first, line {first.line}: {first.error})",
            file=sys.stderr,
        )
    elif out:
        print(f"zoo predict: wrote {len(rows)} rows to {out}", file=sys.stderr)
    return 0


__all__ = ["answer_lines", "csv_cells", "csv_columns", "model_input", "output_format", "predict_file"]
