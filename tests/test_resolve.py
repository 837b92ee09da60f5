"""One resolution: a name is resolved once per load and once per fine-tune, into a typed source
that `zoo.load` takes as it is."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.loading import resolve as resolving
from zoo.loading.resolve import HubRepository, Registered, SavedFolder, resolve
from zoo.store import weight_entries
from zoo.training.finetune import FinetuneOptions, finetune_with_config
from zoo.training.loop.trainer import TrainConfig


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts the resolver's steps on names: the registry lookup, the saved-folder test, and resolve itself."""
    counter: collections.Counter[str] = collections.Counter()

    def counted(name: str, fn):
        def wrapper(*args, **kwargs):
            if not isinstance(args[0], Registered | SavedFolder | HubRepository):  # a source passes through
                counter[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        weight_entries, "arch_and_weights", counted("weight_entries.arch_and_weights", weight_entries.arch_and_weights)
    )
    monkeypatch.setattr(resolving, "saved_folder", counted("saved_folder", resolving.saved_folder))
    monkeypatch.setattr("zoo.loading.build.resolve", counted("resolve", resolving.resolve))
    monkeypatch.setattr("zoo.training.finetune.finetuning.resolve", counted("resolve", resolving.resolve))
    return counter


def test_a_load_resolves_once(calls: collections.Counter[str]) -> None:
    model = zoo.load("resnet20.fmnist", num_classes=5)
    assert model.num_classes == 5
    assert calls == {
        "resolve": 1,
        "weight_entries.arch_and_weights": 1,
    }  # a registered name that is no folder here: no folder check


def test_a_finetune_resolves_once(calls: collections.Counter[str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    for label, value in (("a", 30), ("b", 220)):
        (data / label).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(np.full((28, 28), value + i, np.uint8)).save(data / label / f"{i}.png")
    config = TrainConfig(max_steps=1, batch_size=4, progress=False, tensorboard=False, plot=False)
    finetune_with_config("resnet20.fmnist", data, tmp_path / "out", FinetuneOptions(post_training=False), config=config)
    assert calls == {
        "resolve": 1,
        "weight_entries.arch_and_weights": 1,
    }  # a registered name that is no folder here: no folder check


def test_the_sources(tmp_path: Path) -> None:
    assert resolve("resnet20") == Registered("resnet20", "resnet20", weight_entries.info("resnet20.fmnist"))
    assert resolve("hf-hub:acme/model").repo.repo_id == "acme/model"
    assert isinstance(resolve("hf-hub:acme/model"), HubRepository)
    folder = zoo.save(zoo.load("resnet20.fmnist"), tmp_path / "saved")
    source = resolve(folder)
    assert source == SavedFolder(folder) and resolve(source) is source
    torch.testing.assert_close(zoo.load(source).state_dict(), zoo.load(folder).state_dict())
    named = resolve("resnet20", weights="DEFAULT")
    assert named.entry.name == "resnet20.fmnist" and named.named_by_weights
