"""The package's imports run one way: zoo.architectures (a leaf) <- the weights side, room by room
(base modules <- zoo.store <- zoo.interop's formats and zoo.deploy's optimize/export <- zoo.loading
<- what loads by name: timm's and torchvision's entry points, zoo.deploy.bench, zoo.serve) <-
zoo.training <- the command line (zoo.cli), and nothing imports a bare `architectures` / `training` / `weights`. Read from the source with ast,
so an in-function import counts as much as one at the top of a file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The repository's folders and the package names they install as (pyproject's package-dir).
FOLDERS = {"zoo": "zoo", "architectures": "zoo.architectures", "training": "zoo.training", "weights": "zoo.weights"}
# Ranks in the order the rooms build on each other: a module imports only from its own rank or
# lower. The longest matching prefix gives a module's rank. optimize and export (zoo.deploy) take
# any nn.Module, so they sit below loading; bench, serving and the peers' entry points
# (timm's create_model, torchvision's get_model) load models by name, so they sit above it.
RANKS = {
    "zoo.architectures": 0,
    "zoo.errors": 1,
    "zoo.devices": 1,
    "zoo.tokenizer": 1,
    "zoo.store": 2,
    "zoo.interop": 3,
    "zoo.deploy": 3,
    "zoo.loading": 4,
    "zoo.interop.timm": 5,
    "zoo.interop.torchvision_models": 5,
    "zoo.deploy.bench": 5,
    "zoo.serve": 5,
    "zoo": 5,  # the package's facade: `zoo.load`, `zoo.create_model`... (imported lazily)
    "zoo.training": 6,
    "zoo.cli": 7,
    "zoo.__main__": 7,
}
COMMAND_LINE = RANKS["zoo.cli"]


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    package = FOLDERS[relative.parts[0]]
    parts = [p for p in relative.parts[1:] if p != "__init__"]
    return ".".join([package, *parts])


def layer(module: str) -> int:
    prefixes = [p for p in RANKS if module == p or module.startswith(p + ".")]
    return RANKS[max(prefixes, key=len)]


def layer_name(rank: int) -> str:
    return " / ".join(p for p, r in RANKS.items() if r == rank)


def package_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, relative ones resolved; for
    ``from package import name`` the submodule ``package.name`` when it is one."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in MODULES else base))
    return found


MODULES = {module_name(p) for p in package_files()}
PROJECT = ("zoo", *FOLDERS)


def project_imports() -> list[tuple[str, int, str]]:
    return [
        (module_name(path), line, target)
        for path in package_files()
        for line, target in imported_modules(path)
        if target.split(".")[0] in PROJECT
    ]


def test_the_package_is_found() -> None:
    assert {
        "zoo.loading.build",
        "zoo.cli.parser",
        "zoo.architectures.resnet",
        "zoo.training.loop.trainer",
        "zoo.training.recipes.fmnist",
    } <= MODULES


def test_nothing_imports_the_folders_by_their_bare_names() -> None:
    files = [*package_files(), *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    bare = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in files
        for node in ast.walk(ast.parse(path.read_text()))
        if _absolute_top_names(node) & {"architectures", "training", "weights"}
    ]
    assert not bare, "import through zoo. (zoo.architectures, zoo.training, zoo.weights): " + ", ".join(bare)


def _absolute_top_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return {node.module.split(".")[0]}
    return set()


def test_imports_run_one_way() -> None:
    wrong = [
        f"{source}:{line} ({layer_name(layer(source))}) imports {target} ({layer_name(layer(target))})"
        for source, line, target in project_imports()
        if target.split(".")[0] == "zoo" and layer(target) > layer(source)
    ]
    order = " <- ".join(layer_name(r) for r in sorted(set(RANKS.values())))
    assert not wrong, f"imports must run {order}:\n" + "\n".join(wrong)


def test_only_the_entry_point_imports_the_command_line() -> None:
    users = [
        f"{source}:{line}"
        for source, line, target in project_imports()
        if layer(target) == COMMAND_LINE and layer(source) != COMMAND_LINE
    ]
    assert not users, f"zoo.cli sits on top; nothing imports it: {users}"


def test_no_import_cycles_between_modules() -> None:
    """Package __init__ files are left out: importing a submodule runs its package's __init__
    anyway, and an __init__ that re-exports its submodules is not a cycle of design."""
    graph: dict[str, set[str]] = {}
    for source, _, target in project_imports():
        if target in MODULES and target != source and not _is_package(source) and not _is_package(target):
            graph.setdefault(source, set()).add(target)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _is_package(module: str) -> bool:
    return module in ("zoo", *FOLDERS.values(), "zoo.training.recipes")


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize(
    "source,target,expected",
    [
        ("zoo.architectures.resnet", "zoo.store.registry", True),
        ("zoo.loading.build", "zoo.training.loop.trainer", True),
        ("zoo.training.finetune", "zoo.cli", True),
        ("zoo.training.finetune", "zoo.loading.build", False),
        ("zoo.cli", "zoo.training.finetune", False),
        ("zoo.store.registry", "zoo.loading.build", True),
        ("zoo.loading.build", "zoo.interop.hf_hub", False),
        ("zoo.interop.hf_hub", "zoo.loading.transforms", True),
        ("zoo.loading.build", "zoo.deploy.inference", False),
        ("zoo.deploy.bench", "zoo.loading.build", False),
        ("zoo.serve.app", "zoo.training.finetune", True),
    ],
)
def test_the_rule_flags_what_runs_the_wrong_way(source: str, target: str, expected: bool) -> None:
    assert (layer(target) > layer(source)) is expected
