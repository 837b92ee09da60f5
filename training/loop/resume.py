"""The checkpoint side of `zoo.training.loop.trainer.Trainer`: where a run stands (`TrainState`),
saving and restoring everything an exact resume needs, finding the checkpoint to resume
from, and keeping the best epoch's weights. The file format and its atomic writes are
`zoo.training.loop.checkpoint`'s."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel

from zoo.errors import CheckpointError
from zoo.training.loop.checkpoint import (
    BEST_CHECKPOINT,
    LAST_CHECKPOINT,
    full_model_state,
    full_optimizer_state,
    load_full_state,
    read_best_weights,
    read_checkpoint,
    rng_state,
    set_rng_state,
    write_best_weights,
    write_checkpoint,
)
from zoo.training.loop.meter import EpochMeter
from zoo.training.loop.train_config import TrainConfig

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _restoring(path: str | os.PathLike, part: str) -> Iterator[None]:
    """Restoring ``part`` of checkpoint ``path``: what torch refuses becomes a `CheckpointError`
    naming the file and the part."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as error:
        if isinstance(error, CheckpointError):
            raise
        detail = " ".join(str(error).split())[:300]
        raise CheckpointError(
            f"{path}: its {part} do not fit this run ({type(error).__name__}: {detail}); it was written for another "
            "model or options, or damaged: resume with the run's own options, or delete it to start over"
        ) from None


def _check_like(path: str | os.PathLike, where: str, reference: Any, value: Any) -> None:
    """``value`` has the layout of ``reference`` (a state dict this run made): the same keys,
    list lengths and kinds (numbers, strings, tensors), else a `CheckpointError` naming the field."""
    if isinstance(reference, dict):
        if not isinstance(value, dict) or set(value) != set(reference):
            raise CheckpointError(
                f"{path}: {where} does not fit this run (keys {_keys(value)}, not {_keys(reference)})"
            )
        for key in reference:
            _check_like(path, f"{where}.{key}", reference[key], value[key])
    elif isinstance(reference, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(reference):
            raise CheckpointError(f"{path}: {where} should be a list of {len(reference)}, not {value!r:.80}")
        for index, (ref, item) in enumerate(zip(reference, value)):
            _check_like(path, f"{where}[{index}]", ref, item)
    elif not _same_kind(reference, value):
        raise CheckpointError(f"{path}: {where} should be like {reference!r:.40}, not {value!r:.80}")


def _same_kind(reference: Any, value: Any) -> bool:
    """Both numbers (bools apart), both strings, both tensors, or both None."""
    kinds = (bool, (int, float), str, torch.Tensor, type(None))
    return any(isinstance(reference, k) and isinstance(value, k) for k in kinds) and (
        isinstance(reference, bool) == isinstance(value, bool)
    )


def _keys(value: Any) -> str:
    return ", ".join(sorted(map(str, value))) if isinstance(value, dict) else type(value).__name__


@dataclass
class TrainState:
    """Where training stands; saved in every checkpoint."""

    epoch: int = 0  # epochs completed
    batches_done: int = 0  # micro-batches of the current epoch already trained on (per process)
    global_step: int = 0  # optimizer steps
    best_metric: float | None = None
    best_epoch: int | None = None
    bad_epochs: int = 0
    stopped_early: bool = False
    elapsed_s: float = 0.0  # wall time of training so far, summed over the processes a resumed run took
    history: list[dict[str, float]] = field(default_factory=list)


class Checkpointing:
    """Checkpoints, resume and the best weights, for `Trainer` (which sets these attributes)."""

    config: TrainConfig
    state: TrainState
    model: nn.Module
    wrapped: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    ema: AveragedModel | None
    fsdp: bool
    rank: int
    world_size: int
    is_main: bool
    out_dir: Path | None
    _meter: EpochMeter
    _data_signature: dict[str, int] | None
    _best_state: dict[str, torch.Tensor] | None
    _ticked: float | None  # perf_counter of the last `_tick`, while `fit` runs

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> Path:
        """Write everything needed to continue exactly here (model, optimizer, scheduler,
        scaler, EMA, every process's RNG states, epoch and position in it) to ``path``
        (default out_dir/checkpoints/last.pt), atomically: the file is whole or absent."""
        path = Path(path) if path else self._checkpoint_dir() / LAST_CHECKPOINT
        self._tick()
        local = {"rng": rng_state(), "meter": self._meter.state_dict()}  # each process has its own
        if self.world_size > 1:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, local)
        else:
            gathered = [local]
        model_state = full_model_state(self.wrapped, sharded=self.fsdp)
        optim_state = full_optimizer_state(self.wrapped, self.optimizer, sharded=self.fsdp)
        if self.is_main:
            write_checkpoint(
                path,
                model=model_state,
                optimizer=optim_state,
                scheduler=self.scheduler.state_dict() if self.scheduler is not None else None,
                scaler=self.scaler.state_dict(),
                ema=self.ema.state_dict() if self.ema is not None else None,
                processes=gathered,
                state=dataclasses.asdict(self.state),
                data=self._data_signature,
                config=dataclasses.asdict(self.config),
            )
        if self.world_size > 1:
            dist.barrier()
        return path

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a `save_checkpoint` file; training continues where it stopped."""
        budget = {key: getattr(self.config, key) for key in ("epochs", "max_steps")}
        payload = read_checkpoint(path, self._data_signature, budget)  # its layout checked
        if self.ema is not None and payload["ema"] is None:
            raise CheckpointError(f"{path} holds no EMA weights but ema_decay is set: resume without --ema")
        if len(payload["processes"]) <= self.rank:
            raise CheckpointError(
                f"{path} was written by {len(payload['processes'])} processes, and this is rank {self.rank}"
            )
        # under FSDP self.model is the sharded module itself (fully_shard works in place)
        with _restoring(path, "model and optimizer"):
            load_full_state(self.model, self.optimizer, payload["model"], payload["optimizer"], sharded=self.fsdp)
        with _restoring(path, "scheduler and scaler"):
            if self.scheduler is not None and payload["scheduler"] is not None:
                _check_like(path, "scheduler", self.scheduler.state_dict(), payload["scheduler"])
                self.scheduler.load_state_dict(payload["scheduler"])
            self.scaler.load_state_dict(payload["scaler"])
        if self.ema is not None:
            with _restoring(path, "ema"):
                self.ema.load_state_dict(payload["ema"])
        self.state = TrainState(**{f.name: payload["state"][f.name] for f in dataclasses.fields(TrainState)})
        local = payload["processes"][self.rank]
        self._meter = EpochMeter()
        with _restoring(path, f"processes[{self.rank}]"):
            if self.state.batches_done:
                self._meter.load_state_dict(local["meter"])
            set_rng_state(local["rng"])

    def _tick(self) -> None:
        """Add the wall time since the last tick of this `fit` to ``state.elapsed_s``."""
        if self._ticked is not None:
            now = time.perf_counter()
            self.state.elapsed_s += now - self._ticked
            self._ticked = now

    def best_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The weights of the best epoch by ``monitor`` (EMA weights with ``ema_decay``)."""
        if self._best_state is None and self.out_dir is not None:
            best = self._checkpoint_dir() / BEST_CHECKPOINT
            if best.is_file():
                self._best_state = read_best_weights(best)
        return self._best_state

    def _keep_best(self, eval_model: nn.Module, monitor: str, value: float) -> None:
        """The weights of the epoch just ended are the best so far: keep a CPU copy, and write
        checkpoints/best.pt (what `best_state_dict` reads after a resume)."""
        weights = full_model_state(eval_model, sharded=self.fsdp and eval_model is self.wrapped)
        self._best_state = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        if self.out_dir is not None and self.is_main:
            path = self._checkpoint_dir() / BEST_CHECKPOINT
            write_best_weights(path, self._best_state, self.state.epoch + 1, monitor, value)

    def _resume_path(self) -> Path | None:
        """The checkpoint ``config.resume`` names: the run's last.pt (None when there is none yet) or a path."""
        resume = self.config.resume
        if not resume:
            return None
        if resume is True:
            path = self._checkpoint_dir() / LAST_CHECKPOINT
            if not path.is_file():
                if self.is_main:
                    log.info("no checkpoint at %s: starting a new run", path)
                return None
            return path
        path = Path(resume)
        if not path.is_file():
            raise FileNotFoundError(f"resume checkpoint {path} does not exist")
        return path

    def _checkpoint_dir(self) -> Path:
        """out_dir/checkpoints, where last.pt and best.pt live."""
        if self.out_dir is None:
            raise ValueError("checkpoints need TrainConfig.out_dir (or an explicit path)")
        return self.out_dir / "checkpoints"
