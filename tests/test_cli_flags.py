"""One set of flags: the same thing has the same flag in every ``zoo`` command (``--top-k``,
``--batch-size``, ``--device``, ``--out``); the old spellings still work, hidden from
``--help``, each saying in one line that it is deprecated and which flag replaces it."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import zoo
from zoo.cli import bench_command, export_command, main
from zoo.cli.export_command import format_of
from zoo.cli.parser import COMMANDS, DEVICE_HELP, Command, build_parser
from zoo.deploy import bench
from zoo.devices import resolve_device
from zoo.errors import InvalidArgumentError
from zoo.training import demo, finetune
from zoo.training.loop.train_config import TrainConfig

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
# What each command that runs a model, loads data, trains or times takes of --device, --num-workers and --seed:
# --device wherever a model runs, --num-workers wherever a data loader reads files, --seed wherever something
# random decides the outcome (shards: the shuffle; bench: random weights and inputs; generate: the sampling).
SETTINGS = {"device", "num-workers", "seed"}
TAKES = {
    "predict": {"device", "num-workers"},
    "generate": {"device", "seed"},
    "finetune": {"device", "num-workers", "seed"},
    "tune": {"device", "num-workers", "seed"},
    "eval": {"device", "num-workers"},
    "demo": {"device", "num-workers", "seed"},
    "bench": {"device", "seed"},
    "export": {"device"},
    "serve": {"device"},
    "shards": {"seed"},
}
# The commands whose --device `zoo.cli.parser.main` resolves before their handler runs (the others choose
# their own: finetune, tune, export, eval)
RESOLVED_BY_MAIN = {"predict": ["NAME", "x.png"], "generate": ["NAME", "p"], "demo": [], "bench": [],
                    "serve": ["NAME"]}  # fmt: skip


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


def test_device_workers_and_seed_wherever_a_command_runs_a_model_loads_data_trains_or_times() -> None:
    taken = {name: flags(parser, hidden=False) & SETTINGS for name, parser in subparsers().items()}
    assert {name: found for name, found in taken.items() if found} == TAKES


def test_every_device_has_one_default_and_one_help() -> None:
    """Left out, --device is None in every command (tune: finetune's, unless given), said with the
    same words; a command that runs on the CPU whatever the default says so after them."""
    for name, parser in subparsers().items():
        for action in parser._actions:
            if "--device" in action.option_strings:
                assert action.default in (None, argparse.SUPPRESS if name == "tune" else None), name
                assert action.help.startswith(DEVICE_HELP), (name, action.help)
    assert next(f for f in dataclasses.fields(TrainConfig) if f.name == "device").metadata["option"]["help"] == (
        DEVICE_HELP
    )


@pytest.mark.parametrize("command", sorted(RESOLVED_BY_MAIN))
def test_device_left_out_is_cuda_if_available_else_cpu(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    fake = Command("", COMMANDS[command].arguments, lambda args: seen.append(args.device) or 0)
    monkeypatch.setitem(COMMANDS, command, fake)
    for cuda in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        assert main([command, *RESOLVED_BY_MAIN[command]]) == 0
    assert main([command, *RESOLVED_BY_MAIN[command], "--device", "cpu"]) == 0
    assert seen == ["cuda", "cpu", "cpu"]


def test_resolve_device_checks_what_is_asked_and_keeps_the_cpu_where_work_runs_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(None) == torch.device("cuda")
    assert resolve_device(None, cpu_only=True) == torch.device("cpu")
    assert resolve_device("cuda:1", cpu_only=True) == torch.device("cuda:1")  # asked for: the caller refuses it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == torch.device("cpu")
    with pytest.raises(InvalidArgumentError, match="no CUDA GPU is usable here"):
        resolve_device("cuda")


def test_export_without_format_or_device_writes_onnx_on_the_cpu_where_cuda_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An ONNX file is exported and checked on the CPU: with a GPU, the default device stays the CPU
    for it (CUDA said to be available where the device is chosen; a model loaded there would fail
    on this machine)."""

    def with_a_gpu(*args: object, **kwargs: object) -> torch.device:  # torch.onnx itself must not believe it
        with monkeypatch.context() as patch:
            patch.setattr(torch.cuda, "is_available", lambda: True)
            return resolve_device(*args, **kwargs)

    monkeypatch.setattr(export_command, "resolve_device", with_a_gpu)
    loaded_on = []
    real_load = zoo.load
    monkeypatch.setattr(
        zoo, "load", lambda name, device=None: loaded_on.append(device) or real_load(name, device=device)
    )
    assert main(["export", "resnet20.fmnist", "--out", str(tmp_path / "m.onnx")]) == 0
    assert loaded_on == [torch.device("cpu")]
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'm.onnx'} (onnx, ")


@pytest.mark.parametrize("out,form", [("m.onnx", "onnx"), ("m.pt", "torchscript"), ("d/M.PT2", "exported-program")])
def test_export_format_defaults_to_the_out_suffix(out: str, form: str) -> None:
    assert format_of(out) == form


@pytest.mark.parametrize("out", ["m.bin", "model", "m.onnx.tmp"])
def test_export_refuses_a_suffix_that_names_no_format_in_one_line(
    out: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["export", "resnet20.fmnist", "--out", str(tmp_path / out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"zoo: error: --out {tmp_path / out}: its suffix ") and "names no export format" in line
    assert ".onnx (onnx), .pt (torchscript), .pt2 (exported-program), or pass --format" in line
    assert not (tmp_path / out).exists()


def test_format_and_top_k_say_one_meaning_in_every_command() -> None:
    """--format: the format of the file --out writes; --top-k: the k most likely classes or bytes."""
    helps = {
        (name, option): action.help
        for name, parser in subparsers().items()
        for action in parser._actions
        for option in action.option_strings
        if option in ("--format", "--top-k")
    }
    assert {key for key in helps} == {("predict", "--format"), ("export", "--format"), ("predict", "--top-k"),
                                      ("generate", "--top-k")}  # fmt: skip
    meanings = {"--format": "the format of the file --out writes", "--top-k": "the k most likely "}
    for (name, option), text in helps.items():
        assert text.removeprefix("with --input: ").startswith(meanings[option]), (name, text)
        assert option == "--top-k" or "(default: --out's suffix" in text, (name, text)


def test_demo_trains_and_tests_on_its_device_with_its_workers() -> None:
    args = build_parser(["demo"]).parse_args(["demo", "--device", "cpu", "--num-workers", "2"])
    inner = argparse.ArgumentParser()
    finetune.add_arguments(inner)
    passed = inner.parse_args(demo.finetune_argv(args, Path("train"), Path("val")))
    assert (passed.device, passed.num_workers) == ("cpu", 2)
    left_out = inner.parse_args(demo.finetune_argv(build_parser(["demo"]).parse_args(["demo"]), Path("t"), Path("v")))
    assert (left_out.device, left_out.num_workers) == (None, None)  # finetune's defaults


def test_bench_seed_fixes_random_weights_whatever_is_measured_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same --seed, the same random weights and example inputs for an architecture, alone or
    after another; another seed, others."""
    seen: dict[int, list[float]] = {}

    def fake_measure(target, model, preprocess, model_gmacs, batch_size, repeats, optimize):  # noqa: ANN001, ANN202
        first = next(model.parameters()).detach().flatten()[:8].tolist()
        seen.setdefault(len(seen), []).extend([*first, torch.rand(1).item()])  # the weights, then the RNG's state
        return SimpleNamespace(weights="random"), None  # a row, as measure returns

    monkeypatch.setattr(bench_command, "measure", fake_measure)
    for seed, names in ((0, ["resnet20"]), (0, ["mobilenet_v1_cifar", "resnet20"]), (1, ["resnet20"])):
        bench_command.measure_targets(bench.select(names), [1], repeats=1, seed=seed)
    alone, beside, other = seen[0], seen[2], seen[3]
    assert alone == beside and alone != other


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
