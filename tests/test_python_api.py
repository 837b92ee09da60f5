"""The Python API at the top: ``zoo.finetune(name, data, out, **flags)`` with ``zoo finetune``'s
long flags as keywords (the TrainConfig fields it names are the ones it gives: the others take
the data's defaults), ``zoo.Trainer`` with callbacks, ``zoo.TrainConfig``; all imported lazily,
and ``dir(zoo)`` shows the API only."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import zoo
from zoo.errors import InvalidArgumentError, ZooError

pytestmark = pytest.mark.usefixtures("one_thread")
QUIET = dict(progress=False, tensorboard=False, plot=False, precision="fp32", num_workers=0)


def test_the_api_is_in_all_and_dir_and_nothing_else() -> None:
    assert {"finetune", "Trainer", "TrainConfig"} <= set(zoo.__all__)
    shown = dir(zoo)
    assert {"finetune", "Trainer", "TrainConfig", "load", "__version__"} <= set(shown)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(shown)
    assert not [name for name in ("Any", "TYPE_CHECKING", "annotations", "importlib") if hasattr(zoo, name)]
    from zoo.training.loop.trainer import TrainConfig, Trainer

    assert zoo.Trainer is Trainer and zoo.TrainConfig is TrainConfig


def test_import_zoo_leaves_the_training_loop_unimported() -> None:
    code = "import sys, zoo; dir(zoo); print(any(m.startswith('zoo.training') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- zoo.finetune ------------------------------------------------------------------------------


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What zoo.finetune hands to zoo.training.finetune.finetuning.finetune_with_config (which then does not run)."""
    from zoo.training.finetune import finetuning

    seen: dict[str, Any] = {}

    def fake(name, data, out, options=None, *, config=None, step_fn=None, given=None, callbacks=None):
        seen.update(name=name, data=data, out=out, options=options, config=config, given=given)
        return "result"

    monkeypatch.setattr(finetuning, "finetune_with_config", fake)
    return seen


def test_finetune_passes_the_flags_and_gives_only_the_train_fields_named(captured: dict[str, Any]) -> None:
    result = zoo.finetune(
        "gin3", "mols.csv", "runs/m", epochs=3, batch_size=8, clip_grad=1.0, task="regression", no_progress=True
    )
    assert result == "result"
    config, options = captured["config"], captured["options"]
    assert captured["given"] == {"epochs", "batch_size", "clip_grad_norm", "progress"}
    assert (config.epochs, config.batch_size, config.clip_grad_norm, config.progress) == (3, 8, 1.0, False)
    assert config.lr == zoo.TrainConfig().lr and config.out_dir == "runs/m"  # not given: the data's defaults may apply
    assert options.molecules.task == "regression" and options.augment is None and options.distill is None
    assert options.command == (
        "zoo.finetune('gin3', 'mols.csv', 'runs/m', epochs=3, batch_size=8, clip_grad=1.0, task='regression', "
        "no_progress=True)"
    )
    zoo.finetune("resnet20", "imgs/", "out")
    assert captured["given"] == set() and captured["options"].molecules is None


def test_finetune_gathers_augmentation_teacher_and_transfer_flags(captured: dict[str, Any]) -> None:
    zoo.finetune(
        "resnet20.fmnist", "imgs/", "out", hflip=True, crop_padding=2, teacher="runs/t", distill_alpha=0.3,
        scratch=True, mode="partial", stages=2, val_data="val/", no_post_training=True,
    )  # fmt: skip
    options = captured["options"]
    assert options.augment.hflip and options.augment.crop_padding == 2
    assert (options.distill.teacher, options.distill.alpha) == ("runs/t", 0.3)
    assert not options.pretrained and not options.post_training
    assert (options.mode, options.stages, options.val_data) == ("partial", 2, "val/")
    assert captured["given"] == set()


@pytest.mark.parametrize(
    "flags,message",
    [
        ({"epoch": 3}, r"unknown keyword epoch=: did you mean epochs="),
        ({"batchsize": 3}, r"unknown keyword batchsize=: did you mean batch_size="),
        ({"frobnicate": 1}, r"unknown keyword frobnicate=: \(its keywords are zoo finetune's long flags"),
        ({"clip_grad": 1.0, "clip_grad_norm": 2.0}, r"clip_grad and clip_grad_norm set the same thing"),
        ({"scratch": "yes"}, r"scratch is a switch, True or False"),
        ({"distill_alpha": 0.3}, r"distill_alpha tune a teacher: add teacher="),
        ({"hflip": True, "augment": None}, r"hflip and augment= set the same thing"),
        ({"epochs": 0}, r"TrainConfig.epochs \(--epochs\)"),
        ({"mode": "most"}, r"FinetuneOptions.mode \(--mode\) must be one of"),
    ],
)
def test_finetune_refuses_a_bad_keyword_by_name(captured: dict[str, Any], flags: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        zoo.finetune("resnet20", "imgs/", "out", **flags)
    assert isinstance(caught.value, ZooError) and not captured


def test_every_flag_of_zoo_finetune_is_a_keyword() -> None:
    from zoo.training.finetune import add_arguments
    from zoo.training.finetune.keywords import KEYWORDS

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    dests = {action.dest for action in parser._actions} - {"help", "name", "data", "out"}
    assert dests <= KEYWORDS, sorted(dests - KEYWORDS)


@pytest.mark.filterwarnings("ignore:.*fewer than the 10 samples")
def test_finetune_end_to_end_returns_its_result(tmp_path: Path) -> None:
    from zoo.training.finetune import FinetuneResult

    g = torch.Generator().manual_seed(0)
    data = tmp_path / "features.npz"
    np.savez(data, x=torch.rand(24, 16, generator=g).numpy(), y=(torch.arange(24) % 3).numpy())
    result = zoo.finetune(
        "dbn", data, tmp_path / "run", scratch=True, model_kwargs={"sizes": [16, 8, 4]}, epochs=2, batch_size=8,
        post_training=False, **QUIET,
    )  # fmt: skip
    assert isinstance(result, FinetuneResult) and len(result.history) == 2 and "val_acc" in result.metrics
    assert zoo.load(result.out)(torch.rand(2, 16)).shape == (2, 3)
    assert "- command: `zoo.finetune('dbn'," in (result.out / "README.md").read_text()


def test_finetune_molecules_keep_the_given_epochs_and_take_the_data_defaults_for_the_rest(tmp_path: Path) -> None:
    pytest.importorskip("rdkit")
    from test_molecules import SMALL, _csv, _tpsa_rows

    train = _csv(tmp_path / "train.csv", _tpsa_rows(0, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bare architecture: trained from scratch
        result = zoo.finetune(
            "gin3", train, tmp_path / "run", epochs=2, batch_size=16, model_kwargs=SMALL, post_training=False, **QUIET
        )
    assert len(result.history) == 2  # given: the molecules' 30+ epochs do not apply
    card = (result.out / "README.md").read_text()
    assert "defaults for molecules" in card and "weight decay 0.0001" in card and "epochs 30" not in card


# -- zoo.Trainer callbacks ---------------------------------------------------------------------


def _tiny() -> tuple[nn.Module, TensorDataset]:
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    return nn.Linear(4, 2), TensorDataset(x, (x[:, 0] > 0).long())


def test_callbacks_see_every_epoch_and_should_stop_ends_the_run_recorded(tmp_path: Path) -> None:
    model, data = _tiny()
    seen: list[tuple[int, float]] = []

    def record(trainer: zoo.Trainer, metrics: dict[str, float]) -> None:
        seen.append((int(metrics["epoch"]), metrics["val_acc"]))
        metrics["epoch"] = -1  # a copy: the history keeps its own

    def stop_at_three(trainer: zoo.Trainer, metrics: dict[str, float]) -> None:
        trainer.should_stop = metrics["epoch"] >= 3

    config = zoo.TrainConfig(epochs=10, batch_size=8, out_dir=str(tmp_path), **QUIET)
    trainer = zoo.Trainer(model, config, callbacks=[record, stop_at_three])
    history = trainer.fit(data, data)
    assert [epoch for epoch, _ in seen] == [1, 2, 3] and [row["epoch"] for row in history] == [1, 2, 3]
    assert seen[-1][1] == history[-1]["val_acc"]
    assert trainer.state.stopped_early
    assert json.loads((tmp_path / "metrics.json").read_text())["stopped_early"] is True
    assert "a callback set trainer.should_stop" in (tmp_path / "train.log").read_text()


def test_should_stop_takes_a_bool_not_a_truthy_word() -> None:
    """Issue 62: ``trainer.should_stop = "no"`` stopped the run (a non-empty string is truthy)."""
    model, data = _tiny()

    def answers_no(trainer: zoo.Trainer, metrics: dict[str, float]) -> None:
        trainer.should_stop = "no"

    trainer = zoo.Trainer(model, zoo.TrainConfig(epochs=3, batch_size=8, **QUIET), callbacks=[answers_no])
    with pytest.raises(InvalidArgumentError, match=r"callback 'answers_no' set trainer.should_stop to 'no'"):
        trainer.fit(data, data)


def test_without_callbacks_a_run_goes_its_epochs() -> None:
    model, data = _tiny()
    trainer = zoo.Trainer(model, zoo.TrainConfig(epochs=2, batch_size=16, **QUIET))
    assert len(trainer.fit(data)) == 2 and not trainer.state.stopped_early and trainer.callbacks == []


@pytest.mark.parametrize("callbacks,message", [(print, r"takes a list of functions"), ([print, 3], r"callbacks\[1\]")])
def test_callbacks_that_are_not_functions_are_refused_before_training(callbacks: Any, message: str) -> None:
    model, _ = _tiny()
    with pytest.raises(InvalidArgumentError, match=message):
        zoo.Trainer(model, zoo.TrainConfig(**QUIET), callbacks=callbacks)


@pytest.mark.parametrize(
    ("args", "keywords", "message"),
    [
        (("resnet20", "d", "o"), {"label_field": 3}, r"zoo.finetune\(\): label_field must be str or None, got 3"),
        (("resnet20", 42, "o"), {}, r"data must be a path .* or a torch_geometric dataset, got int"),
        (("resnet20", ["a.png"], "o"), {}, r"data must be a path .*, got list"),
        (("resnet20", "d", None), {}, r"out must be the folder to save the run in, got None"),
        ((3, "d", "o"), {}, r"name must be a model name or a saved folder \(a string\), got int"),
        (("resnet20", "d", "o"), {"hflip": "yes"}, r"hflip must be bool, got 'yes'"),
        (("resnet20", "d", "o"), {"callbacks": [3]}, r"callbacks must be a list of functions"),
        (
            ("resnet20", TensorDataset(torch.zeros(2, 1)), "o"),
            {},
            r"data is a TensorDataset; it takes paths and torch_geometric datasets: save tensors with torch.save",
        ),
    ],
)
def test_finetune_refuses_arguments_of_the_wrong_type_by_name(tmp_path, args, keywords, message) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        zoo.finetune(*args, **keywords)
    assert not Path("o").exists()


def test_trainer_and_optimize_refuse_a_name_or_a_dict_in_one_line() -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(InvalidArgumentError, match=r"Trainer takes a model \(a torch nn.Module\), got str"):
        zoo.Trainer("resnet20", zoo.TrainConfig())
    with pytest.raises(InvalidArgumentError, match=r"Trainer's config must be a TrainConfig, got dict: TrainConfig"):
        zoo.Trainer(model, {"epochs": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"zoo.optimize\(zoo.load\('resnet20.fmnist'\), x\)"):
        zoo.optimize("resnet20.fmnist", torch.zeros(1, 1, 28, 28))  # type: ignore[arg-type]


def test_a_callback_that_replaces_the_head_is_refused() -> None:
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=2)
    data = TensorDataset(torch.rand(8, 1, 28, 28), torch.arange(8) % 2)

    def new_head(trainer, metrics) -> None:
        trainer.model.reset_classifier(3)

    trainer = zoo.Trainer(model, zoo.TrainConfig(epochs=2, batch_size=4, **QUIET), callbacks=[new_head])
    with pytest.raises(InvalidArgumentError, match=r"callback 'new_head' gave the model parameters the optimizer"):
        trainer.fit(data, data)
