"""MkDocs hook: a line `<!-- csv: results/NAME.csv -->` in a page becomes a Markdown table of
that CSV file (as `zoo bench --csv` writes it: timm's column names), so measured results are
typed once, by the program that measured them.

The path is relative to the repository root (where mkdocs.yml is). Cells are copied as written;
an empty cell shows as "-", and a column empty in every row is left out. A missing file or a
file without rows stops the build.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!--\s*csv:\s*(\S+?)\s*-->[ \t]*$", re.MULTILINE)

# CSV column -> table heading; columns not listed keep their CSV name.
HEADINGS = {
    "model": "model",
    "weights": "weights",
    "top1": "top-1",
    "param_count": "params (M)",
    "gmacs": "GMACs",
    "input_shape": "input",
    "file_size_mb": "MiB",
    "batch_size": "batch",
    "infer_samples_per_sec": "fp32 eager samples/s",
    "infer_step_time_ms": "fp32 eager ms/batch",
    "optimized_samples_per_sec": "optimized samples/s",
    "optimized_precision": "chosen",
    "optimized_speedup": "speed-up",
}


def csv_table(path: Path) -> str:
    """The CSV file at ``path`` as a Markdown table."""
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        raise PluginError(f"{path}: no rows to show")
    columns = [c for c in rows[0] if any((row[c] or "").strip() for row in rows)]
    lines = [
        "| " + " | ".join(HEADINGS.get(c, c) for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        lines.append("| " + " | ".join((row[c] or "").strip().replace("|", r"\|") or "-" for c in columns) + " |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    root = Path(config.config_file_path).parent

    def table(match: re.Match[str]) -> str:
        path = root / match.group(1)
        if not path.is_file():
            raise PluginError(f"{page.file.src_path}: {match.group(0)} names a file that is not there ({path})")
        return csv_table(path)

    return MARKER.sub(table, markdown)
