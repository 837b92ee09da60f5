"""MkDocs hook: a line `<!-- modules -->` in a page becomes the package's tree, one row per
module with the first sentence of its docstring, read from the source (ast, nothing imported),
so the layout page cannot fall behind the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

MARKER = re.compile(r"^<!--\s*modules\s*-->[ \t]*$", re.MULTILINE)
ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"zoo": "zoo", "architectures": "zoo.architectures", "training": "zoo.training"}


def module_rows() -> list[tuple[str, str]]:
    """(module name, what it holds) for every module of the package, in import-name order."""
    rows = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            first = " ".join(doc.split("\n\n")[0].split())
            sentence = re.split(r"(?<=[.:;])\s", first, maxsplit=1)[0].rstrip(".:;")
            rows.append((".".join([package, *parts]), sentence))
    return sorted(rows)


def tree_table() -> str:
    lines = ["| module | holds |", "| --- | --- |"]
    lines += [f"| `{name}` | {text.replace('|', '/')} |" for name, text in module_rows()]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return MARKER.sub(lambda _: tree_table(), markdown)
