"""Every error raised for what a user passed is a `ZooError` subclass, which keeps the builtin it
used to be (ValueError, TypeError, FileNotFoundError) among its bases, so both
``except ZooError`` and the older ``except ValueError`` catch it.

The scan reads the package's source with ast: a ``raise`` of a builtin exception class fails it
unless its line carries ``# internal: <why>``, the mark of a genuine internal invariant (a bug in
zoo, not the user's fault). The behaviour tests call public API with bad input."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from zoo.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    DataError,
    DataNotFoundError,
    InvalidArgumentError,
    ZooError,
)

ROOT = Path(__file__).resolve().parent.parent
# The package's folders (pyproject's package-dir). SCAN_PENDING lists those not scanned yet
# because their raises are still being converted; drop a folder from it once it is done.
PACKAGE_FOLDERS = ("zoo", "architectures", "training")
SCAN_PENDING: set[str] = set()
SCANNED_FOLDERS = tuple(f for f in PACKAGE_FOLDERS if f not in SCAN_PENDING)
INTERNAL_MARK = "# internal:"
# Raised to end a program or an iteration, not to report an error.
NOT_ERRORS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "StopIteration", "StopAsyncIteration"}
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
} - NOT_ERRORS


def builtin_raises(source: str) -> list[tuple[int, str]]:
    """(line, class name) of each ``raise Builtin(...)`` / ``raise Builtin`` in ``source`` whose
    line carries no ``# internal: <why>`` mark (with a reason after the colon)."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(raised, ast.Name) and raised.id in BUILTIN_EXCEPTIONS:
            line = lines[node.lineno - 1]
            _, mark, why = line.partition(INTERNAL_MARK)
            if not (mark and why.strip()):
                found.append((node.lineno, raised.id))
    return sorted(found)


def test_the_scan_finds_builtin_raises_and_honours_the_internal_mark() -> None:
    source = (
        "def f(x):\n"
        "    if x:\n"
        "        raise ValueError(f'bad {x}')\n"
        "    raise KeyError\n"
        "def g():\n"
        "    raise RuntimeError('unreachable')  # internal: the caller checked it\n"
        "def h():\n"
        "    raise RuntimeError('no reason given')  # internal:\n"
        "def k(error):\n"
        "    raise error\n"
        "def m():\n"
        "    raise SystemExit(2)\n"
    )
    assert builtin_raises(source) == [(3, "ValueError"), (4, "KeyError"), (8, "RuntimeError")]


@pytest.mark.parametrize("folder", SCANNED_FOLDERS)
def test_no_bare_builtin_raise_for_user_input(folder: str) -> None:
    """A user's mistake raises a ZooError subclass (zoo.errors); a builtin raise is allowed only
    for an internal invariant, marked ``# internal: <why>`` on the raise's line."""
    problems = [
        f"{path.relative_to(ROOT)}:{line}: raise {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in builtin_raises(path.read_text(encoding="utf-8"))
    ]
    assert not problems, (
        "raise the fitting zoo.errors class (InvalidArgumentError, DataError, CheckpointError...) for what "
        f"a user passed, or mark an internal invariant with '{INTERNAL_MARK} <why>':\n" + "\n".join(problems)
    )


def test_every_package_folder_is_scanned_or_pending() -> None:
    """A new package folder is either scanned or listed as pending, never forgotten."""
    assert set(PACKAGE_FOLDERS) == set(SCANNED_FOLDERS) | SCAN_PENDING
    assert all((ROOT / folder / "__init__.py").is_file() for folder in PACKAGE_FOLDERS)


# ---------------------------------------------------------------------------------------------
# Bad input through the public API: a ZooError, and the builtin it always was


def tiny_classifier() -> nn.Module:
    """A two-class model on 4 features, as cheap as a model gets."""
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 2))


def quiet_config(**fields: object):
    from zoo.training.loop.trainer import TrainConfig

    return TrainConfig(epochs=1, batch_size=4, progress=False, tensorboard=False, plot=False, **fields)


def test_trainer_refuses_fp16_on_the_cpu() -> None:
    from zoo.training.loop.trainer import Trainer

    with pytest.raises(InvalidArgumentError, match="needs a CUDA device") as info:
        Trainer(tiny_classifier(), quiet_config(precision="fp16", device="cpu"))
    assert isinstance(info.value, ValueError) and isinstance(info.value, ZooError)


def test_an_empty_training_set_is_a_data_error() -> None:
    from zoo.training.loop.trainer import Trainer

    trainer = Trainer(tiny_classifier(), quiet_config(device="cpu"))
    empty = TensorDataset(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    with pytest.raises(DataError, match="training set is empty") as info:
        trainer.fit(empty)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ZooError)


def test_a_missing_resume_checkpoint_is_a_checkpoint_error_and_file_not_found(tmp_path: Path) -> None:
    from zoo.training.loop.trainer import Trainer

    config = quiet_config(device="cpu", out_dir=str(tmp_path), resume=str(tmp_path / "missing.pt"))
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    with pytest.raises(CheckpointNotFoundError, match="does not exist") as info:
        Trainer(tiny_classifier(), config).fit(data)
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, FileNotFoundError)


def test_save_checkpoint_without_a_folder_is_refused() -> None:
    from zoo.training.loop.trainer import Trainer

    with pytest.raises(ValueError, match="need TrainConfig.out_dir") as info:
        Trainer(tiny_classifier(), quiet_config(device="cpu")).save_checkpoint()
    assert isinstance(info.value, InvalidArgumentError)


def test_open_data_refuses_a_missing_path_and_a_dataset(tmp_path: Path) -> None:
    from zoo.training.data.kinds import open_data

    with pytest.raises(DataNotFoundError, match="does not exist") as missing:
        open_data(tmp_path / "nowhere.csv")
    assert isinstance(missing.value, FileNotFoundError) and isinstance(missing.value, DataError)
    with pytest.raises(TypeError, match="open_data takes a path") as dataset:
        open_data(TensorDataset(torch.zeros(2, 4)))
    assert isinstance(dataset.value, ZooError)


def test_a_batch_without_targets_is_refused_by_name() -> None:
    from zoo.training.loop.steps import split_batch

    with pytest.raises(TypeError, match="cannot find the targets") as info:
        split_batch(object())
    assert isinstance(info.value, InvalidArgumentError)


def test_an_unknown_finetune_mode_and_plot_without_rows() -> None:
    from zoo.training.finetune.stages import apply_mode
    from zoo.training.loop.records.curves import plot_curves

    with pytest.raises(InvalidArgumentError, match="mode must be one of") as mode:
        apply_mode(tiny_classifier(), "everything")
    assert isinstance(mode.value, ValueError)
    with pytest.raises(ValueError, match="at least one row") as rows:
        plot_curves([], "curves.png")
    assert isinstance(rows.value, ZooError)


def test_a_model_given_the_wrong_input_names_it() -> None:
    from zoo.architectures.dbn import DBN

    model = DBN([4, 3], num_classes=2)
    with pytest.raises(ValueError, match=r"expects input of shape \(N, 4\)") as shape:
        model(torch.zeros(2, 5))
    assert isinstance(shape.value, InvalidArgumentError)
    with pytest.raises(TypeError, match="expects a torch.Tensor") as kind:
        model([[0.0] * 4])
    assert isinstance(kind.value, ZooError)


def test_registering_a_model_name_twice_is_refused() -> None:
    from zoo.architectures import model_builders, register_model

    def zoo_test_twice() -> nn.Module:
        return tiny_classifier()

    register_model(zoo_test_twice)
    try:
        with pytest.raises(InvalidArgumentError, match="registered twice") as info:
            register_model(zoo_test_twice)
        assert isinstance(info.value, ValueError)
    finally:
        model_builders.pop("zoo_test_twice", None)
        from zoo.architectures import registered_specs

        registered_specs.pop("zoo_test_twice", None)


@pytest.mark.parametrize("name", [123, None, b"resnet20"])
def test_a_model_named_by_neither_a_string_nor_a_path_is_refused(name: object) -> None:
    import zoo

    with pytest.raises(ZooError, match="a model is named by a string") as refused:
        zoo.load(name)
    assert isinstance(refused.value, ValueError)
