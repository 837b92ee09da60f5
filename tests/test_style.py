"""House rules as tools: ruff's lint rules and formatter (configured in pyproject.toml) pass on
the whole repository, and no function in the package is over 60 lines, no file over 500."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("zoo", "architectures", "training", "weights")
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 500


def _ruff(*arguments: str) -> subprocess.CompletedProcess[str]:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: it is in the dev extra (pip install -e '.[dev]')")
    return subprocess.run([ruff, *arguments], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint_passes() -> None:
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied() -> None:
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def _package_files() -> list[Path]:
    return sorted(p for folder in PACKAGE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_functions_are_short() -> None:
    long = []
    for path in _package_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_files_are_short() -> None:
    long = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in _package_files()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert not long, f"files over {MAX_FILE_LINES} lines:\n" + "\n".join(long)
