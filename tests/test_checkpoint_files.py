"""A checkpoint is checked like a config before anything in it is used: a last.pt or best.pt that
keeps the format tag but whose fields were changed, dropped or replaced is refused with one
CheckpointError naming the file and the field, never a KeyError or AttributeError traceback."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torch.utils.data import TensorDataset

from zoo.cli import main
from zoo.errors import CheckpointError
from zoo.training.loop.optim import make_scheduler
from zoo.training.loop.records.checkpoint import CHECKPOINT_FORMAT, TRAIN_STATE_SCHEMA, TrainState, read_best_weights
from zoo.training.loop.trainer import TrainConfig, Trainer

QUIET = dict(progress=False, tensorboard=False, plot=False)
pytestmark = pytest.mark.usefixtures("one_thread")


def small_data(n: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], TrainConfig]:
    """A real checkpoint of a tiny run (cosine schedule with warmup, EMA) and its config."""
    out = tmp_path_factory.mktemp("run")
    config = TrainConfig(epochs=2, batch_size=4, warmup_epochs=0.5, ema_decay=0.9, out_dir=str(out), **QUIET)
    Trainer(small_model(), config).fit(small_data())
    return torch.load(out / "checkpoints" / "last.pt", weights_only=True), config


def resume_from(payload: Any, path: Path, config: TrainConfig) -> None:
    """Restore ``payload`` (saved to ``path``) into a fresh Trainer of the same run."""
    torch.save(payload, path)
    trainer = Trainer(small_model(), config)
    trainer._data_signature = {"samples": 8, "batch_size": 4, "world_size": 1}
    trainer.scheduler = make_scheduler(trainer.optimizer, config, 2, 4, "train_loss")
    trainer.load_checkpoint(path)


def test_the_schema_lists_every_field_of_the_train_state() -> None:
    assert list(TRAIN_STATE_SCHEMA) == [f.name for f in dataclasses.fields(TrainState)]


def test_a_whole_checkpoint_resumes(written, tmp_path) -> None:
    resume_from(written[0], tmp_path / "last.pt", written[1])


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (lambda p: {"format": CHECKPOINT_FORMAT}, "it has no 'model'"),
        (lambda p: p | {"config": "notadict"}, "config should be a dict, not str"),
        (lambda p: p | {"state": p["state"] | {"epoch": "3"}}, "state.epoch should be a whole number >= 0, not str"),
        (lambda p: p | {"state": p["state"] | {"stopped_early": 1}}, "state.stopped_early should be a bool, not int"),
        (
            lambda p: p | {"state": p["state"] | {"batches_done": -2}},
            "state.batches_done should be a whole number >= 0",
        ),
        (lambda p: p | {"processes": []}, "processes should be a list of at least 1, not list"),
        (lambda p: p | {"processes": [{"rng": {}, "meter": {}}]}, "it has no 'processes[0].rng.torch'"),
        (lambda p: p | {"model": {"0.weight": 1.5}}, "model should be a dict of tensors, not dict"),
        (lambda p: p | {"scheduler": {"junk": 1}}, "scheduler does not fit this run"),
        (
            lambda p: p | {"optimizer": {"state": {}, "param_groups": [{"params": [0]}]}},
            "model and optimizer do not fit",
        ),
        (lambda p: p | {"model": {"x": torch.zeros(2)}}, "model and optimizer do not fit this run"),
        (lambda p: p | {"ema": None}, "holds no EMA weights"),
        (lambda p: [p], "is not a Trainer checkpoint (format 'list')"),
    ],
)
def test_a_tampered_checkpoint_names_file_and_field(written, tmp_path, tamper, named) -> None:
    payload, config = written
    path = tmp_path / "last.pt"
    with pytest.raises(CheckpointError) as refused:
        resume_from(tamper(copy.copy(payload)), path, config)
    message = str(refused.value)
    assert str(path) in message and named in message, message


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into nested dicts and lists (the fields a tamperer could change)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


def _replaced(payload: Any, path: tuple, value: Any) -> Any:
    """``payload`` with the field at ``path`` set to ``value`` (copies along the path)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    copied = dict(payload) if isinstance(payload, dict) else list(payload)
    copied[head] = _replaced(payload[head], rest, value)
    return copied


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(torch.zeros(2)),
)


@settings(max_examples=80)
@given(data=st.data())
def test_fuzz_any_field_replaced_resumes_or_is_one_checkpoint_error(written, tmp_path_factory, data) -> None:
    """Any field of a real checkpoint set to junk: a CheckpointError naming the file, or a resume
    that restores what is there (a replaced float that still fits, say) - never another error."""
    payload, config = written
    paths = [p for p in _paths(payload) if p[0] not in ("format",)]
    field = data.draw(st.sampled_from(paths))
    path = tmp_path_factory.mktemp("tampered") / "last.pt"
    try:
        resume_from(_replaced(payload, field, data.draw(JUNK)), path, config)
    except CheckpointError as refused:
        assert str(path) in str(refused) and "\n" not in str(refused)


def test_a_tampered_best_pt_names_its_file(tmp_path) -> None:
    best = tmp_path / "best.pt"
    torch.save({"format": CHECKPOINT_FORMAT}, best)
    with pytest.raises(CheckpointError, match=f"{best} is not a valid Trainer checkpoint: it has no 'model'"):
        read_best_weights(best)


def test_zoo_finetune_resume_from_a_tampered_last_pt_is_one_line(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "pngs" / label).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (28, 28), dtype=np.uint8)).save(tmp_path / "pngs" / label / f"{i}.png")
    out = tmp_path / "out"
    argv = ["finetune", "resnet20", "--data", str(tmp_path / "pngs"), "--out", str(out), "--max-steps", "1",
            "--batch-size", "4", "--no-post-training", "--no-progress", "--no-tensorboard"]  # fmt: skip
    with pytest.warns(UserWarning):
        assert main(argv) == 0
    last = out / "checkpoints" / "last.pt"
    whole = torch.load(last, weights_only=True)
    for tampered, named in (({"format": CHECKPOINT_FORMAT}, "it has no 'model'"), (None, "config should be a dict")):
        if tampered is None:
            tampered = whole | {"config": "notadict"}
        torch.save(tampered, last)
        capsys.readouterr()
        with pytest.warns(UserWarning):
            assert main([*argv, "--resume"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"zoo: error: {last} is not a valid Trainer checkpoint") and named in err, err
        assert len(err.splitlines()) == 1
