"""Every numeric option of every command is range-checked when it is parsed (one line, exit 2),
TrainConfig, FinetuneOptions, Augment and Distillation check the same ranges for Python callers
(an InvalidArgumentError naming the field), the rules between fields too, and a run whose loss
becomes NaN or infinite stops with one line, not a traceback."""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from zoo.bounds import Bounds
from zoo.cli import main
from zoo.cli.parser import COMMANDS, build_parser
from zoo.errors import InvalidArgumentError, TrainingDivergedError
from zoo.training import demo
from zoo.training.data.images.augment import Augment
from zoo.training.finetune.distill import Distillation
from zoo.training.finetune.options import FinetuneOptions, options_from_args
from zoo.training.loop.train_config import TrainConfig, config_from_args

# what each command needs besides its options
POSITIONAL = {
    "list": [],
    "info": ["resnet20.fmnist"],
    "predict": ["resnet20.fmnist", "x.png"],
    "generate": ["moe_lm.stdlib", "def f("],
    "finetune": ["resnet20", "--data", "d", "--out", "o"],
    "tune": ["resnet20", "--data", "d", "--out", "o"],
    "shards": ["d", "--out", "o"],
    "eval": ["resnet20.fmnist"],
    "demo": [],
    "bench": [],
    "export": ["resnet20.fmnist", "--format", "onnx", "--out", "m.onnx"],
    "serve": ["resnet20.fmnist"],
}
NASTY = ["-1", "0", "-0.5", "0.5", "1", "5", "inf", "-inf", "nan", "1e400", "1e30", "99999999999999999999", "abc", ""]


def numeric_options(command: str) -> list[argparse.Action]:
    """The options of ``command`` that take a number (every option with a ``type``)."""
    sub = build_parser([command])._subparsers._group_actions[0].choices[command]
    return [a for a in sub._actions if a.option_strings and a.type is not None and a.nargs is None]


def parse(argv: list[str], capsys: pytest.CaptureFixture[str]) -> argparse.Namespace | None:
    """The options of ``argv``, or None when the parser refused them (then with exit 2 and one error line)."""
    try:
        return build_parser(argv).parse_args(argv)
    except SystemExit as exit:
        assert exit.code == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(errors) == 1 and "Traceback" not in errors[0], errors
        return None


def test_every_numeric_option_has_a_checking_type() -> None:
    """A bare ``int`` or ``float`` takes -1, nan and inf alike: every number option checks its range."""
    unchecked = [
        f"zoo {command} {action.option_strings[0]}"
        for command in COMMANDS
        for action in numeric_options(command)
        if action.type in (int, float)
    ]
    assert not unchecked, unchecked


def parser_bounds(parser: argparse.ArgumentParser, where: str) -> list[str]:
    """What is wrong with the numeric options of ``parser``: an option that takes a number must
    have a `Bounds` parser (`parse` or `parse_list`) as its type, with finite low and high limits."""
    problems = []
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0:
            continue
        bounds = getattr(action.type, "__self__", None)
        numeric = action.type in (int, float) or (
            isinstance(action.default, int | float) and not isinstance(action.default, bool)
        )
        name = f"{where} {action.option_strings[0]}"
        if isinstance(bounds, Bounds):
            if bounds.low is None or bounds.high is None:
                problems.append(f"{name}: {bounds} has no {'low' if bounds.low is None else 'high'} limit")
        elif numeric:
            problems.append(f"{name}: takes a number without zoo.bounds (type {action.type})")
    return problems


def test_every_numeric_option_of_every_command_has_both_bounds() -> None:
    """A new option taking a number without a low and a high limit (declared with zoo.bounds, its
    Bounds.parse the argparse type) fails here."""
    problems = [
        p
        for command in COMMANDS
        for p in parser_bounds(build_parser([command])._subparsers._group_actions[0].choices[command], f"zoo {command}")
    ]
    assert not problems, problems


@pytest.mark.parametrize(
    "module",
    ["zoo.training.transfer", "zoo.training.finetune", "zoo.training.recipes.fmnist", "zoo.training.recipes.dbn_weights",
     "zoo.training.recipes.graph_weights", "zoo.training.recipes.moe_lm"],
)  # fmt: skip
def test_every_numeric_option_of_the_python_m_commands_has_both_bounds(module: str, monkeypatch) -> None:
    """``python -m`` commands too: each main's parser, caught as it parses (nothing runs)."""
    import importlib

    class Parsed(Exception):
        pass

    def catch(parser: argparse.ArgumentParser, *args, **kwargs):
        raise Parsed(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    with pytest.raises(Parsed) as parsed:
        importlib.import_module(module).main(["x"])
    assert not parser_bounds(parsed.value.args[0], module), parser_bounds(parsed.value.args[0], module)


def test_a_recipes_count_out_of_range_stops_at_parse_time(capsys) -> None:
    from zoo.training.recipes import fmnist

    target = sorted(fmnist.RECIPES)[0]
    for argv in ([target, "--epochs", "-1"], [target, "--limit", "0"], [target, "--num-workers", "100000"]):
        with pytest.raises(SystemExit) as exit:
            fmnist.main(argv)
        assert exit.value.code == 2 and "must be" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ["finetune", "resnet20", "--data", "d", "--out", "o", "--clip-grad", "-1"],
            "--clip-grad: must be in (0, 1000000000]",
        ),
        (["finetune", "resnet20", "--data", "d", "--out", "o", "--momentum", "5"], "--momentum: must be in [0, 1)"),
        (
            ["finetune", "resnet20", "--data", "d", "--out", "o", "--lr", "inf"],
            "--lr: must be a finite number in (0, 1000]",
        ),
        (
            ["finetune", "resnet20", "--data", "d", "--out", "o", "--warmup-epochs", "-1"],
            "--warmup-epochs: must be in [0, ",
        ),
        (["finetune", "resnet20", "--data", "d", "--out", "o", "--val-fraction", "1"], "--val-fraction: must be in"),
        (["finetune", "resnet20", "--data", "d", "--out", "o", "--seed", "-3"], "--seed: must be from 0 to"),
        (["finetune", "resnet20", "--data", "d", "--out", "o", "--distill-alpha", "2"], "--distill-alpha: must be in"),
        (["demo", "--per-class", "-1"], "--per-class: must be from 1 to 153"),
        (["demo", "--lr", "nan"], "--lr: must be a finite number in (0, 10]"),
        (["generate", "moe_lm.stdlib", "x", "--top-p", "0"], "--top-p: must be in (0, 1], got '0'"),
        (["eval", "resnet20.fmnist", "--limit", "-1"], "--limit: must be from 1 to 100000000"),
        (["bench", "--repeats", "0"], "--repeats: must be from 1 to 100000"),
        (["serve", "m", "--max-wait-ms", "nan"], "--max-wait-ms: must be a finite number"),
    ],
)
def test_a_number_out_of_range_stops_at_parse_time(argv: list[str], problem: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and problem in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["--min-lr", "0.1", "--lr", "0.01"], "TrainConfig.min_lr (--min-lr) must be at most lr (0.01), got 0.1"),
        (["--warmup-epochs", "3", "--epochs", "2"], "TrainConfig.warmup_epochs (--warmup-epochs) must be below epochs"),
    ],
)
def test_rules_between_options_are_one_line_before_anything_runs(options, problem, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["finetune", "resnet20", "--data", str(tmp_path / "nothing"), "--out", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zoo: error: {problem}") and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda: TrainConfig(clip_grad_norm=-1.0),
            "TrainConfig.clip_grad_norm (--clip-grad) must be in (0, 1000000000], got -1.0",
        ),
        (
            lambda: TrainConfig(lr=math.inf),
            "TrainConfig.lr (--lr) must be a finite number in (0, 1000] or auto, got inf",
        ),
        (lambda: TrainConfig(momentum=5), "TrainConfig.momentum (--momentum) must be in [0, 1), got 5"),
        (lambda: TrainConfig(epochs=2.5), "TrainConfig.epochs (--epochs) must be a whole number 1 or more"),
        (lambda: TrainConfig(batch_size=True), "TrainConfig.batch_size (--batch-size) must be a whole number"),
        (lambda: TrainConfig(gamma=0.0), "TrainConfig.gamma must be in (0, 1], got 0.0"),
        (lambda: TrainConfig(betas=(0.9, 1.5)), "TrainConfig.betas must be two numbers in [0, 1)"),
        (lambda: TrainConfig(min_lr=1.0), "TrainConfig.min_lr (--min-lr) must be at most lr"),
        (lambda: TrainConfig(epochs=2, warmup_epochs=2), "TrainConfig.warmup_epochs (--warmup-epochs) must be below"),
        (lambda: FinetuneOptions(stages=0), "FinetuneOptions.stages (--stages) must be 1 or more, got 0"),
        (lambda: FinetuneOptions(val_fraction=float("nan")), "FinetuneOptions.val_fraction (--val-fraction) must be a"),
        (lambda: FinetuneOptions(mode="most"), "FinetuneOptions.mode (--mode) must be one of"),
        (lambda: Augment(color_jitter=-0.1), "Augment.color_jitter (--color-jitter) must be in [0, 1]"),
        (
            lambda: Distillation("t", temperature=0.0),
            "Distillation.temperature (--distill-temperature) must be in (0, 100]",
        ),
    ],
)
def test_python_callers_get_the_same_checks_naming_the_field(make, problem) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        make()
    assert str(refused.value).startswith(problem)


def test_a_recipe_shortened_below_its_warmup_keeps_the_warmups_share() -> None:
    config = TrainConfig(epochs=15, warmup_epochs=1.0).for_epochs(1)
    assert (config.epochs, config.warmup_epochs) == (1, pytest.approx(1 / 15))
    assert TrainConfig(epochs=15, warmup_epochs=1.0).for_epochs(5).warmup_epochs == 1.0


def _accepted(command: str, args: argparse.Namespace) -> None:
    """What the command makes of options the parser let through is valid (no ZooError later)."""
    if command == "finetune":
        config_from_args(args, out_dir=args.out)
        options_from_args(args)
    elif command == "tune":
        from zoo.training.tuning import tune

        tune._checked_budget(args.trials, args.timeout)
        tune._check_fixed(tune.fixed_from_args(args))
    elif command == "demo":
        sub = argparse.ArgumentParser()
        from zoo.training import finetune

        finetune.add_arguments(sub)
        inner = sub.parse_args(demo.finetune_argv(args, Path("train"), Path("val")))
        _accepted("finetune", inner)
    elif command == "generate":
        from zoo.architectures.generation import GenerationOptions

        GenerationOptions(args.max_new_tokens, args.temperature, args.top_k, args.top_p)
    for key, value in vars(args).items():
        if isinstance(value, float):
            assert math.isfinite(value), (command, key, value)
        if isinstance(value, int) and not isinstance(value, bool) and key not in ("seed", "port"):
            assert value >= 0, (command, key, value)


@settings(max_examples=60)
@given(data=st.data())
def test_fuzz_numeric_options_of_every_command(data, capsys) -> None:
    """Any number (negative, zero, inf, nan, huge, junk) in any numeric option of any command:
    exit 2 with one error line, or options the command accepts whole."""
    command = data.draw(st.sampled_from(sorted(COMMANDS)))
    actions = numeric_options(command)
    if not actions:
        return
    chosen = data.draw(st.lists(st.sampled_from(actions), min_size=1, max_size=3, unique_by=lambda a: a.dest))
    argv = [command, *POSITIONAL[command]]
    for action in chosen:
        value = data.draw(st.one_of(st.sampled_from(NASTY), st.floats().map(repr), st.integers().map(str)))
        argv += [action.option_strings[0], value]
    args = parse(argv, capsys)
    if args is not None:
        try:
            _accepted(command, args)
        except InvalidArgumentError as refused:  # a rule between options: one line, before anything runs
            assert "\n" not in str(refused)


def write_pngs(root: Path, per_class: int = 4) -> Path:
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (28, 28), dtype=np.uint8)).save(root / label / f"{i}.png")
    return root


@pytest.mark.usefixtures("one_thread")
def test_a_run_that_diverges_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    """A learning rate so large that the weights overflow: the loss check names it, no traceback."""
    data = write_pngs(tmp_path / "pngs")
    argv = ["finetune", "resnet20", "--data", str(data), "--out", str(tmp_path / "o"), "--max-steps", "2",
            "--epochs", "1", "--batch-size", "4", "--lr", "1000", "--optimizer", "sgd", "--momentum", "0",
            "--no-post-training", "--no-progress", "--no-tensorboard"]  # fmt: skip
    with pytest.warns(UserWarning):
        assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "training diverged" in errors[0] and "--lr" in errors[0], err
    assert "Traceback" not in err
    assert issubclass(TrainingDivergedError, FloatingPointError)


TRAINING_OPTIONS = ["--lr", "--clip-grad", "--momentum", "--weight-decay", "--label-smoothing", "--warmup-epochs",
                    "--min-lr", "--ema", "--batch-size", "--accum-steps", "--val-fraction", "--crop-padding"]  # fmt: skip


@pytest.mark.usefixtures("one_thread")
@settings(max_examples=15)
@given(data=st.data())
def test_fuzz_zoo_finetune_runs_sensibly_or_exits_2(data, tmp_path_factory, capsys) -> None:
    """Drawn values of the training options on a real (tiny) run: exit 0 with finite metrics,
    or exit 2 with one error line (refused when parsed, by a rule between options, or diverged)."""
    root = tmp_path_factory.mktemp("fuzz")
    pngs = root / "pngs" if (root / "pngs").exists() else write_pngs(root / "pngs")
    argv = ["finetune", "resnet20", "--data", str(pngs), "--out", str(root / "out"), "--max-steps", "1",
            "--epochs", "2", "--no-post-training", "--no-progress", "--no-tensorboard", "--optimizer", "sgd"]  # fmt: skip
    for flag in data.draw(st.lists(st.sampled_from(TRAINING_OPTIONS), min_size=1, max_size=3, unique=True)):
        argv += [flag, data.draw(st.sampled_from(["-1", "0", "0.5", "1", "3", "inf", "nan", "1e30", "1e-9"]))]
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if code == 2:
        assert len([line for line in err.splitlines() if "error:" in line]) == 1, err
    else:
        assert code == 0, err
        metrics = json.loads((root / "out" / "metrics.json").read_text())["history"][-1]
        assert all(math.isfinite(v) for v in metrics.values())
