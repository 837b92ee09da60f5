"""Callbacks of `zoo.training.loop.trainer.Trainer`: user code at the end of every epoch.

Each callback is ``fn(trainer, metrics)``, called after the epoch's validation with a copy of
that epoch's row of the history (``epoch``, ``train_loss``, ``val_acc``, ...); the subset of
Lightning's hooks users reach for (logging, stopping, saving). Setting
``trainer.should_stop = True`` ends the run after that epoch, recorded as early stopping is
(``trainer.state.stopped_early``, metrics.json, the card). Under torchrun every process calls
them with the same metrics, and the run stops when any process asks (a callback that writes
files checks ``trainer.is_main``).

    def stop_at_90(trainer, metrics):
        if metrics["val_acc"] >= 0.9:
            trainer.should_stop = True

    zoo.Trainer(model, zoo.TrainConfig(epochs=50), callbacks=[stop_at_90]).fit(train_set, val_set)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from zoo.errors import InvalidArgumentError

Callback = Callable[[Any, dict[str, float]], Any]  # fn(trainer, metrics); what it returns is ignored

__all__ = ["Callback", "checked_callbacks", "run_callbacks"]


def checked_callbacks(callbacks: Sequence[Callback] | None) -> list[Callback]:
    """``callbacks`` as a list, each refused by position unless callable (before any training)."""
    if callbacks is None:
        return []
    if callable(callbacks) or isinstance(callbacks, (str, bytes)):
        raise InvalidArgumentError(f"callbacks= takes a list of functions, got {callbacks!r}: pass [fn]")
    listed = list(callbacks)
    for i, fn in enumerate(listed):
        if not callable(fn):
            raise InvalidArgumentError(
                f"callbacks[{i}] is {fn!r}, not a function; each callback is fn(trainer, metrics)"
            )
    return listed


def _check_parameters_kept(trainer: Any, fn: Callable[..., Any]) -> None:
    """Refuse a callback that gave the model trainable parameters the optimizer does not hold
    (``reset_classifier`` in a callback: the new head would stay at its random start, unsaid)."""
    held = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    new = [name for name, p in trainer.model.named_parameters() if p.requires_grad and id(p) not in held]
    if new:
        raise InvalidArgumentError(
            f"callback {getattr(fn, '__name__', fn)!r} gave the model parameters the optimizer does not train "
            f"({', '.join(new[:3])}{', ...' if len(new) > 3 else ''}): change the model before Trainer(model, ...), "
            "or freeze them (requires_grad=False)"
        )


def run_callbacks(trainer: Any, metrics: dict[str, float]) -> bool:
    """Call each of ``trainer.callbacks`` with a copy of ``metrics``; when one set
    ``trainer.should_stop`` (on any process of a torchrun group: they stop together), mark the
    run stopped early and return True (False when it stopped early already, by patience)."""
    for fn in trainer.callbacks:
        fn(trainer, dict(metrics))
        if not isinstance(trainer.should_stop, bool):  # "no" is truthy: it would stop the run
            raise InvalidArgumentError(
                f"callback {getattr(fn, '__name__', fn)!r} set trainer.should_stop to {trainer.should_stop!r}: "
                "it takes True (stop after this epoch) or False"
            )
        _check_parameters_kept(trainer, fn)
    stop = trainer.should_stop
    if trainer.world_size > 1 and trainer.callbacks:
        flag = torch.tensor([float(stop)], device=trainer.device if trainer.device.type == "cuda" else "cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stop = bool(flag.item())
    if not stop or trainer.state.stopped_early:
        return False
    trainer.state.stopped_early = True
    if trainer.is_main:
        trainer.logs.logger.info(
            "stopped early after epoch %d: a callback set trainer.should_stop", trainer.state.epoch
        )
    return True
