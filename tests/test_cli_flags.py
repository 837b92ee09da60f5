"""One set of flags: the same thing has the same flag in every ``zoo`` command (``--top-k``,
``--batch-size``, ``--device``, ``--out``); the old spellings still work, hidden from
``--help``, each saying in one line that it is deprecated and which flag replaces it."""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.cli.parser import COMMANDS, build_parser

# Spellings of one meaning -> the one flag every command uses for it. serve's --max-batch is its
# own meaning (the most rows dynamic batching puts in one forward, and files in one request), not
# the batch size a command runs at.
SYNONYMS = {
    "topk": "top-k",
    "top_k": "top-k",
    "k": "top-k",
    "batch": "batch-size",
    "batchsize": "batch-size",
    "batch_size": "batch-size",
    "bs": "batch-size",
    "b": "batch-size",
    "csv": "out",
    "output": "out",
    "output-dir": "out",
    "out-dir": "out",
    "o": "out",
    "dev": "device",
    "gpu": "device",
    "cuda": "device",
    "max-batch-size": "max-batch",
    "max_batch": "max-batch",
}
# The renamed flags: (command, old spelling, new flag, arguments that make the command line whole)
RENAMED = [
    ("predict", "--topk", "--top-k", ["NAME", "x.png"]),
    ("bench", "--batch", "--batch-size", []),
    ("bench", "--csv", "--out", []),
    ("export", "--batch", "--batch-size", ["NAME", "--format", "onnx", "--out", "f.onnx"]),
    ("tune", "--metric", "--monitor", ["NAME", "--data", "d", "--out", "o"]),
]
RENAMED_POSITIONAL = [("demo", "--weights", "NAME")]  # the name is positional in every other command
# Commands that run a model: each takes --device (eval re-measures through the recipes' evaluation, on the CPU)
RUN_A_MODEL = {"predict", "generate", "finetune", "bench", "export", "serve"}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def flags(parser: argparse.ArgumentParser, hidden: bool) -> set[str]:
    """The long flags of ``parser`` shown in its --help (or, with ``hidden``, those it hides)."""
    return {
        option.removeprefix("--").removeprefix("no-")
        for action in parser._actions
        if (action.help == argparse.SUPPRESS) == hidden
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def test_every_command_is_walked() -> None:
    assert set(subparsers()) == set(COMMANDS)


def test_one_spelling_per_meaning_across_every_command() -> None:
    spellings: dict[str, set[str]] = {}  # meaning -> the flags that say it
    where: dict[str, list[str]] = {}  # flag -> the commands that take it
    for command, parser in subparsers().items():
        for flag in flags(parser, hidden=False):
            spellings.setdefault(SYNONYMS.get(flag, flag), set()).add(flag)
            where.setdefault(flag, []).append(command)
    two = {
        meaning: {f"--{flag}": where[flag] for flag in sorted(used)}
        for meaning, used in spellings.items()
        if len(used) > 1 or used != {meaning}
    }
    assert not two, f"one meaning, several flags (rename to the meaning's own, keep the old hidden): {two}"


def test_the_commands_that_run_a_model_take_device() -> None:
    parsers = subparsers()
    assert not [name for name in RUN_A_MODEL if "device" not in flags(parsers[name], hidden=False)]


def test_every_hidden_flag_is_a_renamed_one() -> None:
    hidden = {(command, f"--{flag}") for command, parser in subparsers().items() for flag in flags(parser, True)}
    renamed = {(command, old) for command, old, _, _ in RENAMED} | {(c, old) for c, old, _ in RENAMED_POSITIONAL}
    assert hidden == renamed


def test_demo_takes_the_name_positionally_and_its_old_flag_still() -> None:
    with pytest.warns(FutureWarning, match=r"^--weights is deprecated and will go: use NAME$"):
        before = build_parser(["demo"]).parse_args(["demo", "--weights", "resnet20.fmnist"])
    assert before.name == "resnet20.fmnist"
    assert build_parser(["demo"]).parse_args(["demo", "seresnet20.fmnist"]).name == "seresnet20.fmnist"


@pytest.mark.parametrize("command,old,new,rest", RENAMED)
def test_an_old_spelling_sets_what_the_new_flag_does_and_says_so(command: str, old: str, new: str, rest: list) -> None:
    value = "results.csv" if new == "--out" else "3"
    argv = [command, *rest, old, value]
    with pytest.warns(FutureWarning, match=rf"^{old} is deprecated and will go: use {new}$"):
        before = build_parser(argv).parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        now = build_parser(argv).parse_args([command, *rest, new, value])
    assert vars(before) == vars(now)


def test_an_old_spelling_is_refused_as_the_new_one_is() -> None:
    with pytest.raises(SystemExit), pytest.warns(FutureWarning):
        build_parser(["export"]).parse_args(["export", "N", "--format", "onnx", "--out", "f", "--batch", "2",
                                             "--dynamic-batch"])  # fmt: skip


def test_zoo_with_an_old_flag_warns_in_one_line(tmp_path: Path) -> None:
    """What a user sees: the warning line, then the command as it would run with the new flag
    (here refusing a missing image before the model loads)."""
    missing = tmp_path / "missing.png"
    argv = [sys.executable, "-m", "zoo", "predict", "resnet20.fmnist", str(missing), "--topk", "2"]
    run = subprocess.run(argv, capture_output=True, text=True)
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and len(lines) == 2, run.stderr
    assert lines[0] == "zoo: warning: --topk is deprecated and will go: use --top-k"
    assert lines[1].startswith("zoo: error: ") and "missing.png" in lines[1]


def test_zoo_help_says_what_each_command_takes(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for words in ("image folders, text rows", "tensors", "shards", "molecules (SMILES, SDF)", "from SMILES"):
        assert words in shown
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "--topk" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["bench", "resnet20.fmnist", "--device", "tpu"], "device='tpu' is not a device torch knows"),
        (["export", "resnet20.fmnist", "--format", "onnx", "--out", "{tmp}/m.onnx", "--device", "cuda"],
         "--device cuda: an ONNX file runs on any device"),
    ],
)  # fmt: skip
def test_device_is_checked_before_anything_runs(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main([arg.replace("{tmp}", str(tmp_path)) for arg in argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("zoo: error: ") and message in line
