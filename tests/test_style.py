"""House rules as tools: ruff's lint rules and formatter (configured in pyproject.toml) pass on
the whole repository, and no function in the package is over 60 lines, no file over 500, no folder
(room) over 14 modules, and no two modules share a file name."""

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
MAX_ROOM_MODULES = 14  # .py files directly in one folder, __init__.py and __main__.py included
# File names more than one folder may hold: a package's own files. Any other name says one role
# in the whole package (zoo.deploy.bench measures; zoo.cli.bench_command is `zoo bench`).
SHARED_NAMES = {"__init__.py", "__main__.py"}


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


def test_rooms_are_small() -> None:
    folders = {p.parent for p in _package_files()}
    big = {
        f"{folder.relative_to(ROOT)} ({n} modules)": n
        for folder in folders
        if (n := len(list(folder.glob("*.py")))) > MAX_ROOM_MODULES
    }
    assert not big, f"folders over {MAX_ROOM_MODULES} modules, split them into rooms: " + ", ".join(sorted(big))


def test_one_module_name_per_concept() -> None:
    by_name: dict[str, list[str]] = {}
    for path in _package_files():
        if path.name not in SHARED_NAMES:
            by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"modules sharing a file name, name each for its role: {shared}"
