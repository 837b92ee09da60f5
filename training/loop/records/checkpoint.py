"""The Trainer's checkpoint files and the random state they carry.

A checkpoint (format `CHECKPOINT_FORMAT`, ``out_dir/checkpoints/last.pt``) holds everything a
run needs to continue exactly where it stopped: full (unsharded) model and optimizer state,
scheduler, GradScaler, EMA, every process's RNG states and epoch meter, the training state,
the data signature and the config; `write_checkpoint` writes one atomically, `read_checkpoint`
reads it back (``weights_only``) and checks it fits the run. ``best.pt`` holds the best epoch's
weights (`write_best_weights`, `read_best_weights`). `seed_everything`, `rng_state` and
`set_rng_state` cover Python's, NumPy's and torch's (CPU and CUDA) generators. `TrainState` is
where a run stands (saved in every checkpoint); `restore_training` loads a checkpoint's parts
into a run's model, optimizer, scheduler, scaler and EMA, refusing what does not fit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch.optim.swa_utils import AveragedModel

from zoo.errors import CheckpointError, CheckpointNotFoundError, InvalidArgumentError
from zoo.store.files import atomic_path
from zoo.store.state_dict_files import read_torch_file

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "zoo-trainer/1"
LAST_CHECKPOINT = "last.pt"
BEST_CHECKPOINT = "best.pt"


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


# ---------------------------------------------------------------------------------------------
# Checkpoint files


def write_checkpoint(
    path: Path,
    *,
    model: Mapping[str, Any],
    optimizer: Mapping[str, Any],
    scheduler: Mapping[str, Any] | None,
    scaler: Mapping[str, Any],
    ema: Mapping[str, Any] | None,
    processes: list[Any],
    state: Mapping[str, Any],
    data: Mapping[str, int] | None,
    config: Mapping[str, Any],
) -> None:
    """torch.save a checkpoint to ``path`` atomically (the file is whole or absent).
    ``processes`` holds each process's ``{"rng": rng_state(), "meter": ...}`` by rank;
    ``data`` the run's data signature (samples, batch size, world size) that a resume must match."""
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "scaler": scaler,
        "ema": ema,
        "processes": processes,
        "state": state,
        "data": data,
        "config": to_json_types(config),
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def read_checkpoint(
    path: str | os.PathLike, data: Mapping[str, int] | None, budget: Mapping[str, Any]
) -> dict[str, Any]:
    """The payload of a `write_checkpoint` file, loaded to the CPU with ``weights_only=True``,
    after checking that it is one and that it was written for this ``data`` signature (when
    both are known) and this training ``budget`` (``epochs`` and ``max_steps``: the learning-rate
    schedule depends on them)."""
    payload = read_torch_file(path, CheckpointError, _FIX)
    found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
    if found != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a Trainer checkpoint (format {found!r})")
    check_schema(path, payload, CHECKPOINT_SCHEMA)
    if data is not None and payload["data"] is not None and payload["data"] != data:
        raise CheckpointError(
            f"{path} was written for data {payload['data']}, but this run has {data}; "
            "resume with the same data, batch size and number of processes"
        )
    saved = {key: payload["config"].get(key) for key in budget}
    if saved != dict(budget):
        raise CheckpointError(
            f"{path} was written by a run of {saved}, but this run asks for {dict(budget)}; the learning-rate "
            "schedule depends on it: resume with the same epochs and max_steps, or start a new run elsewhere"
        )
    return payload


# What each field of a checkpoint holds, checked before any of it is used: a type or a tuple of
# them (None: the field may be None), a dict (a nested dict with these keys), `ListOf` or
# `TENSORS` (a dict of tensors); `torch.load` and the load_state_dict of the model, optimizer,
# scheduler, scaler and EMA (`restore_training`) check the rest.
@dataclass(frozen=True)
class ListOf:
    """A list of at least ``least`` items, each with the layout ``item``."""

    item: Any
    least: int = 0


NUMBER = (int, float)
TENSORS = "a dict of tensors"
ROW = "a dict of numbers"
COUNT = "a whole number >= 0"
TRAIN_STATE_SCHEMA = {
    "epoch": COUNT,
    "batches_done": COUNT,
    "global_step": COUNT,
    "best_metric": (*NUMBER, None),
    "best_epoch": (COUNT, None),
    "bad_epochs": COUNT,
    "stopped_early": bool,
    "elapsed_s": NUMBER,
    "history": ListOf(ROW),
}
PROCESS_SCHEMA = {
    "rng": {
        "torch": torch.Tensor,
        "numpy": {"keys": torch.Tensor, "pos": int, "has_gauss": int, "cached": NUMBER},
        "python": (list, tuple),
    },
    "meter": {"sums": dict, "samples": NUMBER, "steps": COUNT},
}
CHECKPOINT_SCHEMA = {
    "format": str,
    "model": TENSORS,
    "optimizer": {"state": dict, "param_groups": ListOf(dict, 1)},
    "scheduler": (dict, None),
    "scaler": dict,
    "ema": (TENSORS, None),
    "processes": ListOf(PROCESS_SCHEMA, 1),
    "state": TRAIN_STATE_SCHEMA,
    "data": (dict, None),
    "config": {"epochs": int, "max_steps": (int, None)},
}
_FIX = "delete it to start the run over, or resume from another checkpoint"
_ADVICE = f"it was damaged or not written by zoo; {_FIX}"


def check_schema(path: str | os.PathLike, value: Any, schema: Any, where: str = "") -> None:
    """Refuse ``value`` unless it has ``schema``'s layout (see `CHECKPOINT_SCHEMA`): a
    `CheckpointError` naming the file and the field (``state.epoch``, ``processes[0].rng.torch``)."""
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            _refuse(path, where, "a dict", value)
        for key, inner in schema.items():
            name = f"{where}.{key}" if where else key
            if key not in value:
                raise CheckpointError(f"{path} is not a valid Trainer checkpoint: it has no {name!r}; {_ADVICE}")
            check_schema(path, value[key], inner, name)
    elif isinstance(schema, ListOf):
        if not isinstance(value, list) or len(value) < schema.least:
            _refuse(path, where, f"a list of at least {schema.least}" if schema.least else "a list", value)
        for index, item in enumerate(value):
            check_schema(path, item, schema.item, f"{where}[{index}]")
    else:
        kinds = schema if isinstance(schema, tuple) else (schema,)
        if not any(_holds(value, kind) for kind in kinds):
            _refuse(path, where, " or ".join(_kind_name(k) for k in kinds), value)


def _holds(value: Any, kind: Any) -> bool:
    """``value`` is of ``kind``: None, `TENSORS`, `ROW` or a type (a bool is no int or float)."""
    if kind is None:
        return value is None
    if kind == TENSORS:
        return isinstance(value, dict) and all(isinstance(v, torch.Tensor) for v in value.values())
    if kind == COUNT:
        return _holds(value, int) and value >= 0
    if kind == ROW:
        return isinstance(value, dict) and all(isinstance(k, str) and _holds(v, NUMBER) for k, v in value.items())
    if isinstance(kind, tuple):
        return any(_holds(value, k) for k in kind)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _kind_name(kind: Any) -> str:
    """How a message names a schema's kind."""
    if kind is None or isinstance(kind, str):
        return str(kind)
    return f"{'an' if kind.__name__[0] in 'aeiou' else 'a'} {kind.__name__}"


def _refuse(path: str | os.PathLike, where: str, wanted: str, value: Any) -> None:
    """The `CheckpointError` of a field that does not hold what it should."""
    found = type(value).__name__ if value is not None else "None"
    raise CheckpointError(
        f"{path} is not a valid Trainer checkpoint: {where or 'the file'} should be {wanted}, not {found}; {_ADVICE}"
    )


def write_best_weights(path: Path, weights: dict[str, torch.Tensor], epoch: int, monitor: str, value: float) -> None:
    """``best.pt``: the best epoch's weights, its number and its ``monitor`` value, atomically."""
    with atomic_path(path) as tmp:
        torch.save({"model": weights, "epoch": epoch, monitor: value}, tmp)


def read_best_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The weights of a `write_best_weights` file, on the CPU (checked to be a dict of tensors)."""
    payload = read_torch_file(path, CheckpointError, _FIX)
    check_schema(path, payload, {"model": TENSORS, "epoch": int})
    return payload["model"]


def to_json_types(value: Any) -> Any:
    """``value`` (a config as a dict) made of JSON types only: mappings become dicts, tuples and
    lists become lists, and anything but str, int, float, bool and None becomes its str()."""
    if isinstance(value, Mapping):
        return {k: to_json_types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_types(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


# ---------------------------------------------------------------------------------------------
# Restoring a checkpoint into a run


def checkpoint_dir(out_dir: Path | None) -> Path:
    """out_dir/checkpoints, where a run's last.pt and best.pt live."""
    if out_dir is None:
        raise InvalidArgumentError("checkpoints need TrainConfig.out_dir (or an explicit path)")
    return out_dir / "checkpoints"


def resume_checkpoint(resume: bool | str | os.PathLike, out_dir: Path | None, announce: bool) -> Path | None:
    """The checkpoint a run's ``resume`` option names: the run's last.pt (None when there is
    none yet: the run starts over, and says so when ``announce``), or a path, which must exist."""
    if not resume and elastic_resume(out_dir):
        resume = True  # under torchrun --max-restarts: a restarted group goes on from its last checkpoint
    if not resume:
        return None
    if resume is True:
        path = checkpoint_dir(out_dir) / LAST_CHECKPOINT
        if os.path.lexists(path) and not path.is_file():  # a folder, or a link to nothing: not a run to start over
            raise CheckpointError(f"{path} is not a checkpoint file; {_ADVICE}")
        if not path.is_file():
            if announce:
                log.info("no checkpoint at %s: starting a new run", path)
            return None
        return path
    path = Path(resume)
    if not path.is_file():
        raise CheckpointNotFoundError(f"resume checkpoint {path} does not exist")
    return path


def elastic_resume(out_dir: str | os.PathLike | None) -> bool:
    """Whether a run resumes by itself: started by torchrun with ``--max-restarts`` above 0
    (the elastic agent restarts the whole group after a worker dies, or the job is started
    again) and its out_dir holds a last.pt. Every process decides alike from the same file, so
    out_dir must be on storage every node sees. (TORCHELASTIC_RESTART_COUNT is not used: a node
    whose workers were restarted because another node's died keeps a count of 0.)"""
    restarts = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if out_dir is None or not restarts.isdigit() or int(restarts) == 0:
        return False
    return (Path(out_dir) / "checkpoints" / LAST_CHECKPOINT).is_file()


def restore_training(
    path: str | os.PathLike,
    payload: Mapping[str, Any],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: torch.amp.GradScaler,
    ema: AveragedModel | None,
    sharded: bool,
) -> None:
    """Load a `read_checkpoint` payload's model, optimizer, scheduler, scaler and EMA state
    into a run's own (under FSDP ``model`` is the sharded module itself: fully_shard works in
    place); what does not fit becomes a `CheckpointError` naming the file and the part."""
    if ema is not None and payload["ema"] is None:
        raise CheckpointError(f"{path} holds no EMA weights but ema_decay is set: resume without --ema")
    with restoring(path, "model and optimizer"):
        load_full_state(model, optimizer, payload["model"], payload["optimizer"], sharded=sharded)
    with restoring(path, "scheduler and scaler"):
        if scheduler is not None and payload["scheduler"] is not None:
            check_like(path, "scheduler", scheduler.state_dict(), payload["scheduler"])
            scheduler.load_state_dict(payload["scheduler"])
        scaler.load_state_dict(payload["scaler"])
    if ema is not None:
        with restoring(path, "ema"):
            ema.load_state_dict(payload["ema"])


@contextlib.contextmanager
def restoring(path: str | os.PathLike, part: str) -> Iterator[None]:
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


def check_like(path: str | os.PathLike, where: str, reference: Any, value: Any) -> None:
    """``value`` has the layout of ``reference`` (a state dict this run made): the same keys,
    list lengths and kinds (numbers, strings, tensors), else a `CheckpointError` naming the field."""
    if isinstance(reference, dict):
        if not isinstance(value, dict) or set(value) != set(reference):
            raise CheckpointError(
                f"{path}: {where} does not fit this run (keys {_keys(value)}, not {_keys(reference)})"
            )
        for key in reference:
            check_like(path, f"{where}.{key}", reference[key], value[key])
    elif isinstance(reference, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(reference):
            raise CheckpointError(f"{path}: {where} should be a list of {len(reference)}, not {value!r:.80}")
        for index, (ref, item) in enumerate(zip(reference, value)):
            check_like(path, f"{where}[{index}]", ref, item)
    elif not _same_kind(reference, value):
        raise CheckpointError(f"{path}: {where} should be like {reference!r:.40}, not {value!r:.80}")


def _same_kind(reference: Any, value: Any) -> bool:
    """Both numbers (bools apart), both strings, both tensors, or both None."""
    kinds = (bool, (int, float), str, torch.Tensor, type(None))
    return any(isinstance(reference, k) and isinstance(value, k) for k in kinds) and (
        isinstance(reference, bool) == isinstance(value, bool)
    )


def _keys(value: Any) -> str:
    """A dict's keys, sorted, for a message (else the value's type)."""
    return ", ".join(sorted(map(str, value))) if isinstance(value, dict) else type(value).__name__


# ---------------------------------------------------------------------------------------------
# Full (unsharded) state dicts, under FSDP too


def full_model_state(model: nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
    """The whole state dict of ``model``: gathered to the CPU from every process when it is
    ``sharded`` (FSDP2), else that of the module inside an AveragedModel (EMA) or DDP wrapper."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    module = model.module if isinstance(model, (AveragedModel, nn.parallel.DistributedDataParallel)) else model
    return module.state_dict()


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict[str, Any]:
    """The whole state dict of ``optimizer`` (gathered to the CPU when ``model`` is ``sharded``)."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=options)
    return optimizer.state_dict()


def load_full_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],
    optim_state: dict[str, Any],
    sharded: bool,
) -> None:
    """Load whole model and optimizer state dicts (`full_model_state`, `full_optimizer_state`)
    into ``model`` and ``optimizer``, each process taking its shard when ``model`` is ``sharded``."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, model_state, options=options)
        set_optimizer_state_dict(model, optimizer, optim_state, options=options)
        return
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optim_state)


# ---------------------------------------------------------------------------------------------
# Random state


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """This process's generator states (Python, NumPy, torch CPU and CUDA), as data that
    ``torch.load(weights_only=True)`` can read back."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "cached": cached,
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore the generator states of `rng_state`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    random.setstate(_lists_to_tuples(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _lists_to_tuples(value: Any) -> Any:
    """``value`` with every (nested) list turned back into a tuple, as `random.setstate` needs."""
    return tuple(_lists_to_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
