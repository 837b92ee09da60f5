"""The command line's table (`zoo.cli.parser.COMMANDS`): every subcommand the parser knows has
exactly one handler there and every handler a subcommand; each handler reaches its own
``run_<command>`` and imports its module only when it runs. And no attribute of the zoo.cli or
zoo.serve package hides a submodule of the same name (``import zoo.serve.app as m`` once gave
the function)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from zoo.cli import parser
from zoo.cli.parser import COMMANDS, build_parser, main

CLI = Path(parser.__file__).parent


def subcommands(built: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name."""
    actions = [a for a in built._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1, actions
    return dict(actions[0].choices)


def run_functions() -> dict[str, list[str]]:
    """Every top-level ``run_*`` function of zoo/cli, by name -> the modules defining it (read with ast)."""
    found: dict[str, list[str]] = {}
    for path in sorted(CLI.glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("run_"):
                found.setdefault(node.name, []).append(f"zoo.cli.{path.stem}")
    return found


def test_every_subcommand_has_one_handler_and_every_handler_a_subcommand() -> None:
    known = subcommands(build_parser())
    assert sorted(known) == sorted(COMMANDS)
    handlers = [command.run for command in COMMANDS.values()]
    assert all(callable(h) for h in handlers)
    assert len(set(handlers)) == len(handlers), "two commands share a handler"
    for name, command in COMMANDS.items():  # the table's help line is the one the parser shows
        assert command.help, name


def test_each_handler_is_defined_once_and_named_for_its_command() -> None:
    found = run_functions()
    assert sorted(found) == sorted(f"run_{name}" for name in COMMANDS)
    twice = {name: modules for name, modules in found.items() if len(modules) > 1}
    assert not twice, f"defined more than once: {twice}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_handler_runs_its_own_command(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (module_name,) = run_functions()[f"run_{name}"]
    if module_name == "zoo.cli.serving":
        pytest.importorskip("uvicorn")
    module = importlib.import_module(module_name)
    seen: list[argparse.Namespace] = []

    def recorder(args: argparse.Namespace) -> int:
        seen.append(args)
        return 7

    monkeypatch.setattr(module, f"run_{name}", recorder)
    args = argparse.Namespace(command=name)
    assert COMMANDS[name].run(args) == 7
    assert seen == [args]


def test_main_dispatches_through_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def recorder(args: argparse.Namespace) -> int:
        seen.append(args)
        return 3

    monkeypatch.setitem(COMMANDS, "list", dataclasses.replace(COMMANDS["list"], run=recorder))
    assert main(["list", "resnet*"]) == 3
    assert [(a.command, a.pattern, a.command_line) for a in seen] == [("list", "resnet*", "zoo list 'resnet*'")]


def test_zoo_list_imports_no_other_commands_module() -> None:
    code = (
        "import contextlib, io, json, sys\nfrom zoo.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['list'])\n"
        "sys.__stdout__.write(json.dumps(sorted(m for m in sys.modules if m.startswith('zoo.cli'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == ["zoo.cli", "zoo.cli.catalog", "zoo.cli.parser"]


def _package(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:  # zoo.serve without the serve extra
        pytest.skip(f"{name}: {error}")


@pytest.mark.parametrize("package_name", ["zoo.cli", "zoo.serve"])
def test_no_package_attribute_hides_a_submodule(package_name: str) -> None:
    package = _package(package_name)
    hidden = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package_name}.{info.name}")
        if getattr(package, info.name) is not module:
            hidden.append(f"{package_name}.{info.name} is {getattr(package, info.name)!r}")
    assert not hidden, hidden


def test_the_serve_entry_point_is_a_function_beside_its_modules() -> None:
    serve = _package("zoo.serve")
    application = importlib.import_module("zoo.serve.application")
    assert callable(serve.app) and not isinstance(serve.app, ModuleType)
    assert serve.create_app is application.create_app
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("zoo.serve.app")
