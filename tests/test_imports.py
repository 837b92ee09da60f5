"""The package's imports run one way between rooms (folders): zoo.architectures (a leaf) <- the
base modules (zoo.errors, zoo.devices, zoo.tokenizer, zoo.bounds) <- zoo.store <- zoo.interop (the peers'
formats) and zoo.deploy (optimize, export, measuring: any nn.Module) <- zoo.loading <- zoo.peers
(timm's and torchvision's entry points) <- the facade `zoo` <- zoo.serve (with its routes) <- zoo.training
(its own rooms in order: loop <- data, with its sub-rooms by input kind <- belief_nets, finetune <- the
commands on top and tuning <- recipes) <- zoo.cli. Rooms of one rank don't import each other (a room's
sub-rooms are one room with it), and nothing imports a bare `architectures` / `training` /
`weights`. Read from the source with ast, so an in-function import counts as much as one at the
top of a file."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The repository's folders and the package names they install as (pyproject's package-dir).
FOLDERS = {"zoo": "zoo", "architectures": "zoo.architectures", "training": "zoo.training", "weights": "zoo.weights"}
# Every room (a folder; the modules directly in zoo/ are the base room, `zoo` itself the facade)
# and its rank: a room imports only rooms of a lower rank, and its own.
ROOMS = {
    "zoo.architectures": 0,
    "zoo.architectures.moe": 0,  # the MoE family, a sub-room of the architectures
    "zoo.errors": 1,
    "zoo.devices": 1,
    "zoo.tokenizer": 1,
    "zoo.bounds": 1,
    "zoo.store": 2,
    "zoo.interop": 3,
    "zoo.deploy": 3,
    "zoo.loading": 4,
    "zoo.peers": 5,
    "zoo.inference": 5,  # one path from inputs to answers: zoo.predict, the MLflow model
    "zoo": 6,  # the facade: `zoo.load`, `zoo.create_model`... (imported lazily)
    "zoo.serve": 7,
    "zoo.serve.routes": 7,  # zoo.serve's routes, a sub-room of it
    "zoo.training.loop": 8,
    "zoo.training.loop.records": 8,  # what a run leaves to read: checkpoints, logs, curves, MLflow
    "zoo.training.data": 9,  # and its sub-rooms by input kind, one room with it:
    "zoo.training.data.images": 9,
    "zoo.training.data.text": 9,
    "zoo.training.data.tensors": 9,
    "zoo.training.data.shards": 9,
    "zoo.training.data.molecules": 9,
    "zoo.training.data.graphs": 9,
    "zoo.training.belief_nets": 10,
    "zoo.training.finetune": 10,
    "zoo.training": 11,  # the commands on top of its rooms: demo, transfer
    "zoo.training.tuning": 11,  # zoo tune: fine-tuning runs as trials
    "zoo.training.recipes": 12,
    "zoo.cli": 13,
    "zoo.__main__": 13,
}
# Rooms of one rank that are one room: the base modules every room uses; the command line and its entry point.
# A room's sub-rooms (folders inside its folder) are one room with it.
DATA_ROOMS = {r for r in ROOMS if r == "zoo.training.data" or r.startswith("zoo.training.data.")}
ONE_ROOM = [
    {"zoo.errors", "zoo.devices", "zoo.tokenizer", "zoo.bounds"},
    {"zoo.cli", "zoo.__main__"},
    {"zoo.serve", "zoo.serve.routes"},
    {"zoo.architectures", "zoo.architectures.moe"},
    {"zoo.training.loop", "zoo.training.loop.records"},
    DATA_ROOMS,
]
COMMAND_LINE = ROOMS["zoo.cli"]


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    package = FOLDERS[relative.parts[0]]
    parts = [p for p in relative.parts[1:] if p != "__init__"]
    return ".".join([package, *parts])


def room(module: str) -> str:
    """The room a module sits in: the longest room name that is the module or a package above it."""
    return max((r for r in ROOMS if module == r or module.startswith(r + ".")), key=len)


def rank(module: str) -> int:
    return ROOMS[room(module)]


def same_room(a: str, b: str) -> bool:
    return room(a) == room(b) or any({room(a), room(b)} <= group for group in ONE_ROOM)


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
PACKAGES = {module_name(p) for p in package_files() if p.name == "__init__.py"}
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


def test_every_package_folder_is_installed() -> None:
    """pyproject lists the packages one by one: a new room (folder) is left out of the wheel unless named there."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert PACKAGES == listed, (
        f"pyproject.toml's packages: add {sorted(PACKAGES - listed)}, drop {sorted(listed - PACKAGES)}"
    )


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


def wrong_way(source: str, target: str) -> bool:
    """Whether ``source`` importing ``target`` breaks the rooms' order."""
    if same_room(source, target):
        return False
    return rank(target) >= rank(source)


def test_every_module_has_a_room() -> None:
    """A new folder gets its rank here, not the rank of whatever prefix it happens to share."""
    rooms = {".".join(m.split(".")[:2]) for m in MODULES if m.count(".") >= 2 and not m.startswith("zoo.training")}
    rooms |= {".".join(m.split(".")[:3]) for m in MODULES if m.startswith("zoo.training.") and m.count(".") >= 3}
    rooms |= {m for m in MODULES if m.count(".") == 1 and m not in PACKAGES}  # the modules directly in zoo/
    rooms |= {m.rpartition(".")[0] for m in MODULES if m not in PACKAGES and m.count(".") >= 2}  # every folder
    assert rooms <= set(ROOMS), f"give these rooms a rank in ROOMS: {sorted(rooms - set(ROOMS))}"


def test_imports_run_one_way() -> None:
    wrong = [
        f"{source}:{line} ({room(source)}) imports {target} ({room(target)})"
        for source, line, target in project_imports()
        if target.split(".")[0] == "zoo" and wrong_way(source, target)
    ]
    order = " <- ".join(" / ".join(r for r, n in ROOMS.items() if n == k) for k in sorted(set(ROOMS.values())))
    assert not wrong, f"imports must run {order}:\n" + "\n".join(wrong)


def test_no_import_cycles_between_rooms() -> None:
    graph: dict[str, set[str]] = {}
    for source, _, target in project_imports():
        if target.split(".")[0] == "zoo" and not same_room(source, target):
            graph.setdefault(room(source), set()).add(room(target))
    cycle = _find_cycle(graph)
    assert cycle is None, "rooms import each other: " + " -> ".join(cycle or [])


def test_only_the_entry_point_imports_the_command_line() -> None:
    users = [
        f"{source}:{line}"
        for source, line, target in project_imports()
        if rank(target) == COMMAND_LINE and rank(source) != COMMAND_LINE
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
    return module in PACKAGES


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
        ("zoo.architectures.resnet", "zoo.store.weight_entries", True),
        ("zoo.loading.build", "zoo.training.loop.trainer", True),
        ("zoo.training.finetune", "zoo.cli", True),
        ("zoo.training.finetune", "zoo.loading.build", False),
        ("zoo.cli", "zoo.training.finetune", False),
        ("zoo.store.weight_entries", "zoo.loading.build", True),
        ("zoo.loading.build", "zoo.interop.hf_hub", False),
        ("zoo.interop.hf_hub", "zoo.loading.transforms", True),
        ("zoo.loading.build", "zoo.deploy.inference", False),
        ("zoo.deploy.bench", "zoo.loading.build", True),
        ("zoo.interop.hf_hub", "zoo.deploy.inference", True),  # one rank, two rooms
        ("zoo.peers.timm", "zoo.loading.build", False),
        ("zoo.training.loop.trainer", "zoo.training.data.images.augment", True),
        ("zoo.training.data.images.augment", "zoo.bounds", False),
        ("zoo.errors", "zoo.devices", False),  # the base room
        ("zoo.serve.application", "zoo.training.finetune", True),
        ("zoo.training.data.shards.shard_writer", "zoo.training.data.kinds", False),  # a sub-room is its room's
        ("zoo.serve.routes.v2", "zoo.serve.server", False),
        ("zoo.training.finetune", "zoo.training.tuning.tune", True),
        ("zoo.training.tuning.tune", "zoo.training.finetune", False),
    ],
)
def test_the_rule_flags_what_runs_the_wrong_way(source: str, target: str, expected: bool) -> None:
    assert wrong_way(source, target) is expected
