"""Properties of `open_data` on generated user data: CSV and JSONL files (quotes, commas,
missing and empty fields, unicode, BOMs, blank lines, stray bytes, empty files) and image
folders (sizes, modes L/RGB/RGBA/P, corrupt and non-image files, empty and single classes).

The property: the data loads with the number of samples and classes that the test works out
on its own from what it generated, or `DataError` is raised whose message names the file
(with the line of the first bad row) or the folder; and nothing is written outside tmp_path.
The number of examples comes from the hypothesis profile (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st
from PIL import Image

from zoo.errors import DataError
from zoo.training.data.kinds import open_data

# --- nothing written outside tmp_path -----------------------------------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_WRITE_EVENTS = {
    "os.mkdir",
    "os.rename",
    "os.replace",
    "os.remove",
    "os.rmdir",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.utime",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.move",
}
_recorded: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _recorded is None:
        return
    if event == "open" and not isinstance(args[0], int) and isinstance(args[2], int) and args[2] & _WRITE_FLAGS:
        _recorded.append(os.fsdecode(args[0]))
    elif event in _WRITE_EVENTS:
        target = args[0]
        _recorded.append(os.fsdecode(target) if isinstance(target, (str, bytes, os.PathLike)) else repr(target))


sys.addaudithook(_audit)  # inert unless `writes_only_inside` is recording


@contextlib.contextmanager
def writes_only_inside(root: Path) -> Iterator[None]:
    """Record every file opened for writing, created, moved or removed (Python's audit events),
    from a working directory inside ``root``; fail if one lies outside ``root``."""
    global _recorded
    workdir = Path(tempfile.mkdtemp(dir=root))
    _recorded = []
    try:
        with contextlib.chdir(workdir):
            yield
    finally:
        written, _recorded = _recorded, None
    outside = [p for p in written if not Path(os.path.abspath(p)).is_relative_to(root)]
    assert not outside, f"wrote outside {root}: {outside}"
    assert not any(workdir.iterdir()), f"wrote into the working directory: {list(workdir.iterdir())}"


def fresh_dir(tmp_path: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


def names(message: str, path: Path) -> bool:
    """``message`` names ``path`` itself (not merely a file inside it)."""
    return re.search(re.escape(str(path)) + r"(?![\w/.-])", message) is not None


def load_everything(path: Path):
    """open_data, then every sample read (image files are decoded only when read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # classes without samples, tiny classes: warnings, not errors
        source = open_data(path)
    samples = [source.full()[i] for i in range(source.num_samples)]
    return source, samples


# --- text files --------------------------------------------------------------------------------

SAFE = st.characters(categories=("L", "N"))  # the first character of a text: a letter or digit
ODD = st.sampled_from([*"ab ,;\"'\t\n\r", "é", "漢", "😀", "\u2028", "\x00"])
BODY = st.text(ODD | st.characters(codec="utf-8"), max_size=8)
TEXTS = st.builds(str.__add__, SAFE, BODY)
WORDS = st.lists(st.text(st.sampled_from([*"xyzé"]), min_size=1, max_size=3), min_size=1, max_size=2).map(" ".join)
LABELS = st.sampled_from(["cat", "dog", " émû ", "Cat", "0", "1", "2", "-1"])
VOCABULARIES = st.sampled_from([("cat", "dog", " émû ", "Cat"), ("0", "1", "2"), ("1", "2")])  # of clean rows
CLASS_INDEX = re.compile(r"-?[0-9]+")


@dataclass
class Row:
    kind: str  # ok, blank, or the row's defect
    text: object = ""
    label: object = ""


@dataclass
class TextFile:
    """A generated text file and what the test expects of it."""

    plan: tuple[str, ...]  # ("clean",), ("mess",), or the defects planted among clean rows
    content: bytes
    rows: list[Row]
    row_lines: list[int]  # the line each row starts on
    bad_line: int | None  # the line of the first bad row (without a CSV header: the first row)
    bad_byte_line: int | None  # the line of the first byte that is not UTF-8


def expected_classes(labels: list[str]) -> tuple[dict[str, int], int | None]:
    """Samples per class name, and the position of the first negative class index (or None),
    as the docs describe them: all-integer labels are class indices 0..max, others names."""
    if labels and all(CLASS_INDEX.fullmatch(label) for label in labels):
        indices = [int(label) for label in labels]
        negative = next((i for i, index in enumerate(indices) if index < 0), None)
        counts = Counter(indices)
        return {str(i): counts[i] for i in range(max(indices) + 1)}, negative
    return dict(Counter(labels)), None


def line_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def planned_rows(
    draw: st.DrawFn,
    plan: tuple[str, ...],
    ok_texts: st.SearchStrategy[str],
    defects: dict[str, st.SearchStrategy[Row]],
    mess: st.SearchStrategy[Row],
) -> list[Row]:
    """Rows for ``plan``: clean rows of two classes or more (labels from one vocabulary), with
    the planned defect at a drawn position, and blank lines anywhere; or a mess of anything."""
    if "mess" in plan:
        return draw(st.lists(mess, max_size=8))
    vocabulary = draw(VOCABULARIES)
    texts = draw(st.lists(ok_texts, min_size=2, max_size=6))
    labels = [*draw(st.permutations(vocabulary))[:2], *(draw(st.sampled_from(vocabulary)) for _ in texts[2:])]
    rows = [Row("ok", text, label) for text, label in zip(texts, labels)]  # new objects: drawn ones print as drawn
    for defect in plan:
        if defect in defects:
            rows.insert(draw(st.integers(0, len(rows))), draw(defects[defect]))
    for _ in range(draw(st.integers(0, 2))):
        rows.insert(draw(st.integers(0, len(rows))), Row("blank", draw(st.sampled_from(["", " ", "\t "]))))
    return rows


def check_text_file(path: Path, file: TextFile) -> None:
    """The property for a text file whose rows the test wrote: it loads as written, or the
    DataError names the file and the line of its first problem (see the module docstring)."""
    path.write_bytes(file.content)
    for defect in file.plan:
        event(f"{path.suffix} file: {defect}")
    good = [(line, row) for line, row in zip(file.row_lines, file.rows) if row.kind == "ok"]
    labels = [str(row.label).strip() for _, row in good]
    counts, negative = expected_classes(labels)
    with writes_only_inside(path.parent.parent):
        try:
            source, samples = load_everything(path)
        except DataError as error:
            message = str(error)
            event("DataError")
            assert names(message, path), message
            if file.bad_byte_line is not None:
                assert re.search(rf"line {file.bad_byte_line}\b: byte 0xff is not UTF-8", message), message
            elif file.bad_line is not None:
                assert re.search(rf"line {file.bad_line}\b", message), (message, file)
            elif not good:
                assert "holds no rows" in message or "is empty" in message, message
            elif negative is not None:
                assert re.search(rf"line {good[negative][0]}\b: label -", message), message
            else:
                present = sum(1 for count in counts.values() if count)
                assert present < 2 and f"has {present} class" in message, message
            return
    event("loaded")
    assert file.bad_byte_line is None and file.bad_line is None, f"loaded, but it has a bad line: {file}"
    present = sum(1 for count in counts.values() if count)
    assert negative is None and present >= 2, f"loaded data it should refuse: {file}"
    assert source.num_samples == len(good) == len(samples) and source.num_classes == len(counts)
    assert source.class_counts == counts
    numeric = all(CLASS_INDEX.fullmatch(label) for label in labels)
    for (_, row), (text, index) in zip(good, samples):
        if path.suffix == ".csv":  # spaces and tabs at the end of a line are dropped, in quoted texts too
            assert text == re.sub(r"[ \t]+(\r\n|\r|\n)", r"\1", row.text)
        else:
            assert text == row.text
        label = str(row.label).strip()
        assert source.class_names[index] == (str(int(label)) if numeric else label)


def csv_field(text: str) -> str:
    if any(c in text for c in ',"\n\r') or text != text.strip(" \t"):
        return '"' + text.replace('"', '""') + '"'
    return text


CSV_DEFECTS = {  # texts start with a letter or digit, so a quote left open meets an error, never a closing quote
    "comma": st.builds(Row, st.just("comma"), st.builds(lambda a, b: f"{a}, {b}", WORDS, WORDS), LABELS),
    "nolabel": st.builds(Row, st.just("nolabel"), TEXTS),
    "emptylabel": st.builds(Row, st.just("emptylabel"), TEXTS, st.sampled_from(["", " "])),
    "emptytext": st.builds(Row, st.just("emptytext"), st.sampled_from(["", " ", "\t"]), LABELS),
    "unclosed": st.builds(Row, st.just("unclosed"), WORDS, LABELS),
}
CSV_MESS = st.one_of(
    st.builds(Row, st.just("ok"), TEXTS, LABELS),
    st.builds(Row, st.just("blank"), st.sampled_from(["", " ", "\t "])),
    *CSV_DEFECTS.values(),
)
PLANS = ["mess", "bad byte", "no header"]


def draw_plan(draw: st.DrawFn, defects: list[str]) -> tuple[str, ...]:
    """About half the files clean (they must load as written), the rest with one to three
    planned defects, or a mess of anything."""
    if draw(st.booleans()):
        return ("clean",)
    return tuple(draw(st.lists(st.sampled_from(defects), min_size=1, max_size=3, unique=True)))


@st.composite
def csv_files(draw: st.DrawFn) -> TextFile:
    plan = draw_plan(draw, [*CSV_DEFECTS, *PLANS])
    rows = planned_rows(draw, plan, TEXTS, CSV_DEFECTS, CSV_MESS)
    columns = draw(st.sampled_from([["text", "label"], ["label", "text"], ["id", "text", "label"]]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    has_header = "no header" not in plan
    pad = draw(st.sampled_from(["", "", " ", "\t"]))  # trailing whitespace on each line
    parts: list[str | bytes] = ["\ufeff" if draw(st.booleans()) else ""]
    if has_header:
        parts.append(",".join(columns) + pad + newline)
    lines_with_rows = [i for i, r in enumerate(rows) if r.kind != "blank"]
    bad_byte_at = draw(st.sampled_from(lines_with_rows)) if "bad byte" in plan and lines_with_rows else None
    row_lines, bad_line, bad_byte_line = [], None, None
    for i, row in enumerate(rows):
        line = line_breaks("".join(p for p in parts if isinstance(p, str))) + 1
        row_lines.append(line)
        if i == bad_byte_at:
            parts.append(b"\xff")  # starts the row's line
            bad_byte_line = line
        if row.kind == "blank":
            parts.append(row.text + newline)
            continue
        values = {"id": str(i), "label": str(row.label), "text": csv_field(row.text)}
        if row.kind == "comma":
            values["text"] = row.text  # unquoted: one field too many
        elif row.kind == "unclosed":
            values["text"] = '"' + row.text  # the quote never closes
        cells = [values[c] for c in columns if c != "label" or row.kind != "nolabel"]
        parts.append(",".join(cells) + pad + newline)
        if bad_line is None and (row.kind != "ok" or not has_header):
            bad_line = line  # without a header, the first row is read as one, and refused
    content = b"".join(p.encode() if isinstance(p, str) else p for p in parts)
    return TextFile(plan, content, rows, row_lines, bad_line, bad_byte_line)


@given(csv_files())
def test_csv_files_load_as_written_or_name_the_bad_line(tmp_path: Path, file: TextFile) -> None:
    path = fresh_dir(tmp_path) / "data" / "rows.csv"
    path.parent.mkdir()
    check_text_file(path, file)


JSON_TEXTS = st.text(max_size=8)
JSON_LABELS = st.one_of(LABELS, st.integers(-1, 3))
JSONL_DEFECTS = {
    "badjson": st.builds(Row, st.just("badjson"), JSON_TEXTS, JSON_LABELS),
    "notobject": st.builds(Row, st.just("notobject"), JSON_TEXTS, JSON_LABELS),
    "nolabel": st.builds(Row, st.just("nolabel"), JSON_TEXTS),
    "badlabel": st.builds(
        Row, st.just("badlabel"), JSON_TEXTS, st.sampled_from([None, True, 1.5, ["cat"], {"name": "cat"}])
    ),
    "badtext": st.builds(Row, st.just("badtext"), st.sampled_from([None, 3, ["a"]]), JSON_LABELS),
    "emptytext": st.builds(Row, st.just("emptytext"), st.sampled_from(["", " ", "\n"]), JSON_LABELS),
}
JSONL_MESS = st.one_of(
    st.builds(Row, st.just("ok"), JSON_TEXTS, JSON_LABELS),  # an empty text here is a defect too
    st.builds(Row, st.just("blank"), st.sampled_from(["", " ", "\t"])),
    *JSONL_DEFECTS.values(),
)


@st.composite
def jsonl_files(draw: st.DrawFn) -> TextFile:
    plan = draw_plan(draw, [*JSONL_DEFECTS, *PLANS[:-1]])
    rows = planned_rows(draw, plan, st.builds(str.__add__, SAFE, JSON_TEXTS), JSONL_DEFECTS, JSONL_MESS)
    for i, row in enumerate(rows):
        if row.kind == "ok" and isinstance(row.label, str) and row.label.isdigit() and draw(st.booleans()):
            rows[i] = row = Row(row.kind, row.text, int(row.label))  # class indices as JSON numbers
        if row.kind == "ok" and not row.text.strip():
            rows[i] = Row("emptytext", row.text, row.label)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    ascii_only = draw(st.booleans())
    parts: list[bytes] = [b"\xef\xbb\xbf" if draw(st.booleans()) else b""]
    lines_with_rows = [i for i, r in enumerate(rows) if r.kind != "blank"]
    bad_byte_at = draw(st.sampled_from(lines_with_rows)) if "bad byte" in plan and lines_with_rows else None
    row_lines, bad_line = [], None
    for i, row in enumerate(rows):
        row_lines.append(i + 1)
        if i == bad_byte_at:
            parts.append(b"\xff")
        fields = {"text": row.text, "label": row.label, **({"id": i} if draw(st.booleans()) else {})}
        if row.kind == "blank":
            line = row.text
        elif row.kind == "nolabel":
            line = json.dumps({"text": row.text}, ensure_ascii=ascii_only)
        elif row.kind == "notobject":
            line = json.dumps([row.text, row.label], ensure_ascii=ascii_only)
        else:
            line = json.dumps(fields, ensure_ascii=ascii_only)
            if row.kind == "badjson":
                line = line[:-1]
        parts.append((line + newline).encode())
        if row.kind not in ("ok", "blank") and bad_line is None:
            bad_line = i + 1
    bad_byte_line = None if bad_byte_at is None else bad_byte_at + 1
    return TextFile(plan, b"".join(parts), rows, row_lines, bad_line, bad_byte_line)


@given(jsonl_files())
def test_jsonl_files_load_as_written_or_name_the_bad_line(tmp_path: Path, file: TextFile) -> None:
    path = fresh_dir(tmp_path) / "data" / "rows.jsonl"
    path.parent.mkdir()
    check_text_file(path, file)


# --- image folders -------------------------------------------------------------------------------


@dataclass
class File:
    kind: str  # image, garbage, truncated, empty, text, hidden
    mode: str = "RGB"
    size: tuple[int, int] = (1, 1)
    suffix: str = ".png"


SIZES = st.tuples(st.integers(1, 16), st.integers(1, 16))
IMAGES = st.one_of(
    st.builds(
        File,
        st.just("image"),
        st.sampled_from(["L", "RGB", "RGBA", "P"]),
        SIZES,
        st.sampled_from([".png", ".PNG", ".bmp"]),
    ),
    st.builds(File, st.just("image"), st.sampled_from(["L", "RGB"]), SIZES, st.sampled_from([".jpg", ".jpeg"])),
)
FILES = st.one_of(
    IMAGES,
    st.builds(
        File,
        st.sampled_from(["garbage", "truncated", "empty"]),
        st.just("RGB"),
        st.just((8, 8)),
        st.sampled_from([".png", ".jpg"]),
    ),
    st.builds(File, st.sampled_from(["text", "hidden"])),
)
CLASS_NAMES = st.sampled_from(["ant", "bee", "cow", "Dog", "élan"])


@st.composite
def image_folders(draw: st.DrawFn) -> dict[str, list[File]]:
    """Class name -> files: about half the time 2-4 classes of readable images (plus files to
    skip), otherwise anything: empty or single classes, corrupt files, nothing at all."""
    if draw(st.booleans()):
        ignored = st.builds(File, st.sampled_from(["text", "hidden"]))
        files = st.tuples(st.lists(IMAGES, min_size=1, max_size=4), st.lists(ignored, max_size=1))
        files = files.map(lambda pair: pair[0] + pair[1])
        return draw(st.dictionaries(CLASS_NAMES, files, min_size=2, max_size=4))
    return draw(st.dictionaries(CLASS_NAMES, st.lists(FILES, max_size=4), max_size=4))


def write_file(folder: Path, index: int, file: File, rng_byte: int) -> Path | None:
    """Write ``file``; return its path when open_data should count it as an image."""
    if file.kind == "text":
        (folder / f"notes{index}.txt").write_text("not an image")
        return None
    if file.kind == "hidden":
        (folder / f"._{index}.png").write_bytes(b"\x00\x05\x16\x07AppleDouble")  # macOS resource fork
        (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
        return None
    path = folder / f"{index}{file.suffix}"
    if file.kind == "image":
        mode = "RGB" if file.mode == "P" and file.suffix == ".bmp" else file.mode
        image = Image.new("RGB", file.size, (rng_byte, 255 - rng_byte, 7)).convert(mode)
        image.save(path)
    elif file.kind == "garbage":
        path.write_bytes(b"this is not an image " + bytes([rng_byte]) * 8)
    elif file.kind == "truncated":
        buffer = io.BytesIO()
        Image.new("RGB", file.size, (rng_byte, 3, 200)).save(buffer, "PNG" if file.suffix == ".png" else "JPEG")
        path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    else:
        path.write_bytes(b"")
    return path


@given(image_folders(), st.booleans(), st.integers(0, 255))
def test_image_folders_load_as_written_or_name_the_file(tmp_path: Path, classes, extras: bool, byte: int) -> None:
    root = fresh_dir(tmp_path) / "images"
    root.mkdir()
    images: dict[str, list[tuple[Path, File]]] = {}
    for name, files in classes.items():
        (root / name).mkdir()
        images[name] = [(p, f) for i, f in enumerate(files) if (p := write_file(root / name, i, f, byte)) is not None]
    if extras:  # ignored: loose files at the root, a hidden folder of images
        (root / "README.txt").write_text("about the data")
        (root / ".ipynb_checkpoints").mkdir()
        Image.new("L", (2, 2)).save(root / ".ipynb_checkpoints" / "x.png")

    names_in_order = sorted(images)
    empty = [name for name in names_in_order if not images[name]]
    corrupt = [p for name in names_in_order for p, f in images[name] if f.kind != "image"]
    with writes_only_inside(tmp_path):
        try:
            source, samples = load_everything(root)
        except DataError as error:
            message = str(error)
            event("images: DataError")
            if not images:
                assert names(message, root) and "no class folders" in message, message
            elif empty:
                assert names(message, root / empty[0]) and "holds no images" in message, message
            elif len(images) < 2:
                assert names(message, root) and "has 1 class" in message, message
            else:
                assert any(names(message, p) for p in corrupt), (message, corrupt)
            return
    event("images: loaded")
    assert images and not empty and len(images) >= 2 and not corrupt, "loaded data it should refuse"
    expected = [
        (str(p), index)
        for index, name in enumerate(names_in_order)
        for p, _ in sorted(images[name], key=lambda pf: pf[0].name)
    ]
    assert source.class_names == names_in_order and source.num_classes == len(images)
    assert source.num_samples == len(expected) == len(samples)
    assert source.class_counts == {name: len(images[name]) for name in names_in_order}
    assert [label for _, label in samples] == [label for _, label in expected]
    modes = set()
    for path, _ in expected[:16]:
        with Image.open(path) as image:
            modes.add(image.mode)
    assert source.in_chans == (1 if modes == {"L"} else 3)
    assert {image.mode for image, _ in samples} == {"L" if source.in_chans == 1 else "RGB"}
