"""The finetune room says what it holds (issue 63): its ``__init__`` is a face, a docstring and
the names other code imports from ``zoo.training.finetune``, defined in named modules; and
`finetune` has one signature, `zoo.finetune`'s (the run from a `TrainConfig` is
`finetune_with_config`)."""

from __future__ import annotations

import ast
import inspect
import pkgutil
from pathlib import Path

import zoo
import zoo.training.finetune as face

ROOT = Path(__file__).resolve().parent.parent
ROOM = ROOT / "training" / "finetune"
PACKAGE = "zoo.training.finetune"


def _is_face_statement(node: ast.stmt) -> bool:
    """An import, the docstring, or ``__all__``: what a face holds."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    return isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]


def _names_used_from_the_face(path: Path) -> set[str]:
    """The names ``path`` takes from ``zoo.training.finetune``: ``from zoo.training.finetune import X``,
        ``ALIAS.X`` where ALIAS is the package imported by name, and ``monkeypatch.setattr("zoo.training.finetune.X.Y", ...)``
    (as ``X.Y``)."""
    tree = ast.parse(path.read_text())
    names, aliases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "zoo.training":
            aliases |= {alias.asname or alias.name for alias in node.names if alias.name == "finetune"}
        elif isinstance(node, ast.Import):
            aliases |= {alias.asname for alias in node.names if alias.name == PACKAGE and alias.asname}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setattr" and node.args:
            target = node.args[0]
            if isinstance(target, ast.Constant) and str(target.value).startswith(PACKAGE + "."):
                names.add(str(target.value)[len(PACKAGE) + 1 :])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


def _resolves(name: str) -> bool:
    try:
        pkgutil.resolve_name(name)
    except (ImportError, AttributeError):
        return False
    return True


def test_the_init_is_a_face_and_holds_every_name_imported_from_it() -> None:
    tree = ast.parse((ROOM / "__init__.py").read_text())
    assert ast.get_docstring(tree), "training/finetune/__init__.py says what the room holds"
    logic = [f"line {node.lineno}: {type(node).__name__}" for node in tree.body if not _is_face_statement(node)]
    assert not logic, f"training/finetune/__init__.py is a face, its logic belongs in a named module: {logic}"
    for name in face.__all__:
        assert getattr(getattr(face, name), "__module__", None) != PACKAGE, f"{name} is defined in the face"
    files = [p for folder in ("zoo", "training", "tests", "benchmarks") for p in (ROOT / folder).rglob("*.py")]
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in _names_used_from_the_face(path)
        if not _resolves(f"{PACKAGE}.{name}")
    )
    assert not missing, f"names taken from {PACKAGE} that it no longer has: {missing}"


def test_finetune_has_one_signature() -> None:
    assert face.finetune is zoo.finetune
    assert inspect.signature(face.finetune) == inspect.signature(zoo.finetune)
    defined = sorted(
        path.name
        for path in ROOM.glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name == "finetune"
    )
    assert defined == ["keywords.py"], f"one function named finetune, zoo.finetune: {defined}"
    assert "config" in inspect.signature(face.finetune_with_config).parameters
