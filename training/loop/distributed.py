"""Processes and devices for `zoo.training.loop.trainer.Trainer`: joining the process group that
``torchrun`` describes, this process's device, and data parallelism: a model wrapped in
DistributedDataParallel or sharded with FSDP2 block by block, and the gradient all-reduce
skipped on all but the last micro-batch of an optimizer step; a group that lost a process
ends in one `PeerLostError` line (`lost_peer`)."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist
import torch.nn as nn

from zoo.devices import checked_device
from zoo.errors import InvalidArgumentError, ZooError, without_cpp_frames
from zoo.training.loop.records.checkpoint import LAST_CHECKPOINT, checkpoint_dir

# What Gloo and NCCL say when another process of the group is gone (killed, its node lost).
_PEER_ADDRESS = re.compile(r"\[([0-9A-Za-z.:-]+)\]:(\d+)")  # Gloo: "Connection closed by peer [10.0.0.7]:59308"
_PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "nccl", "gloo", "timed out")


T = TypeVar("T")


def from_first_process(value: T | None, world_size: int, device: torch.device) -> T:
    """The first process's ``value`` on every process of a torchrun group (what the first one
    measured alone: precision auto's choice, the learning-rate finder's value)."""
    if world_size == 1:
        assert value is not None  # internal: the only process measured
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    return box[0]  # type: ignore[return-value]


class PeerLostError(ZooError, RuntimeError):
    """Another process of a torchrun group is gone (killed, or its node lost) and did not come
    back: the run stops, its last checkpoint kept."""


def init_distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank); joins the process group torchrun describes (NCCL on
    GPUs, Gloo on CPU) unless one is already initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size < 2:
        return 0, 1, 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend)
    if dist.get_rank() == 0 and (note := restart_note(os.environ)):
        warnings.warn(note, stacklevel=2)
    return dist.get_rank(), dist.get_world_size(), local_rank


def restart_note(env: Mapping[str, str]) -> str | None:
    """What an elastic group (``torchrun --max-restarts``) lacks to restart reliably: torch's
    agents keep one key-value store across rendezvous rounds unless
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, and a restarted worker may then read a dead one's
    address and the group never meets again (seen in zoo's own elastic tests)."""
    restarts = env.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if not restarts.isdigit() or int(restarts) == 0 or env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1":
        return None
    return (
        f"torchrun --max-restarts {restarts} without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: after a worker dies, "
        "the restarted group may never meet again; export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 where torchrun "
        "starts (see the docs page 'Training on many machines')"
    )


def pick_device(requested: str | None, local_rank: int) -> torch.device:
    """``requested`` (checked to exist), else this process's GPU, else the CPU."""
    if requested is not None:
        return checked_device(requested)
    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The blocks FSDP shards one by one: the items of the model's top-level ModuleLists."""
    return [block for child in model.children() if isinstance(child, nn.ModuleList) for block in child]


def use_fsdp(model: nn.Module, distributed: str, world_size: int) -> bool:
    """Whether ``model`` is sharded with FSDP2 (``distributed="fsdp"``), after checking that
    there are processes to shard it over and blocks to shard it by."""
    if distributed != "fsdp":
        return False
    if world_size < 2:
        raise InvalidArgumentError(
            "distributed='fsdp' shards the model over processes: "
            "start the script with torchrun --nproc_per_node=N (N >= 2)"
        )
    if not shard_units(model):
        raise InvalidArgumentError(
            f"distributed='fsdp' shards a model's list of blocks (nn.ModuleList), and {type(model).__name__} "
            "has none; use distributed='ddp'"
        )
    return True


def wrap_model(
    model: nn.Module, world_size: int, fsdp: bool, device: torch.device, find_unused_parameters: bool
) -> nn.Module:
    """``model`` itself in one process; with more, sharded in place by FSDP2 (``fsdp``: each
    of its `shard_units`, then the rest) or wrapped in DistributedDataParallel."""
    if world_size < 2:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in shard_units(model):
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=find_unused_parameters)


def gradient_sync(wrapped: nn.Module, last: bool, world_size: int, fsdp: bool) -> contextlib.AbstractContextManager:
    """The context for a micro-batch's forward and backward: the gradient all-reduce of a
    `wrap_model` model is skipped on all but the ``last`` micro-batch of an optimizer step."""
    if world_size < 2:
        return contextlib.nullcontext()
    if fsdp:
        wrapped.set_requires_gradient_sync(last)
        return contextlib.nullcontext()
    return contextlib.nullcontext() if last else wrapped.no_sync()


def average_gradients(params: list[torch.Tensor], world_size: int) -> None:
    """Average ``.grad`` over the processes by hand, for a step that sets the gradients itself
    (DDP's hooks only see gradients that autograd computes)."""
    if world_size < 2:
        return
    for param in params:
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world_size


def lost_peer(error: BaseException, world_size: int, out_dir: Path | None) -> PeerLostError | None:
    """``error`` as one clear `PeerLostError` when it is a collective of a torchrun group whose
    other process is gone (None otherwise): which process, which checkpoint of ``out_dir`` is
    kept, and how to go on (with ``--resume`` where torchrun does not restart by itself)."""
    checkpoint = checkpoint_dir(out_dir) / LAST_CHECKPOINT if out_dir is not None else None
    text = without_cpp_frames(str(error))
    if world_size < 2 or not isinstance(error, RuntimeError) or not any(s in text.lower() for s in _PEER_GONE):
        return None
    restarts = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")
    resume = "" if restarts.isdigit() and int(restarts) > 0 else " with --resume (TrainConfig(resume=True))"
    kept = (
        f"its last checkpoint {checkpoint} is kept: start the same torchrun command again on every node{resume} "
        "and it resumes from there"
        if checkpoint is not None and checkpoint.is_file()
        else "no checkpoint was written yet: start the run again"
    )
    peer = _PEER_ADDRESS.search(text)
    where = f" (at {peer.group(1)}:{peer.group(2)})" if peer else ""
    return PeerLostError(
        f"another process of the {world_size}-process group{where} is gone (its node was lost, or it was killed and "
        f"did not come back: {text[:160]}); {kept}"
    )
