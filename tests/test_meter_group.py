"""`EpochMeter.reduce` in a group where one process got no sample (a validation set smaller than
the group, e.g. 1 image on 2 processes): the same collectives of the same sizes on every process
(was Gloo's 'Received data size doesn't match expected size', an abort of the whole run)."""

from __future__ import annotations

import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zoo.training.loop.meter import EpochMeter


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _reduce(rank: int, port: int, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        meter = EpochMeter()
        if rank == 0:  # rank 1 got no validation sample
            meter._add("loss", torch.tensor(0.5))
            meter._add("correct", torch.tensor(1.0))
            meter._add("counted", torch.tensor(1.0))
            meter.kept["cat/outputs"] = [torch.ones(1, 2)]
            meter.samples, meter.steps = 1, 1
        meter.reduce()
        results[rank] = (meter.samples, meter.steps, {k: float(v) for k, v in meter.sums.items()}, sorted(meter.kept))
    finally:
        dist.destroy_process_group()


def test_a_process_without_samples_reduces_with_the_others() -> None:
    with mp.Manager() as manager:
        results = manager.dict()
        group = mp.start_processes(_reduce, args=(_free_port(), results), nprocs=2, start_method="spawn", join=False)
        deadline = time.monotonic() + 60  # bounded: before the fix the group hung (or aborted)
        while not group.join(timeout=1):
            if time.monotonic() > deadline:
                for process in group.processes:
                    process.kill()
                raise AssertionError("the two processes' reduce did not finish in 60 s")
        results = dict(results)
    expected = (1, 1, {"correct": 1.0, "counted": 1.0, "loss": 0.5}, ["cat/outputs"])
    assert results == {0: expected, 1: expected}
