"""Torch's threads on a model's worker thread.

The server runs each model on a worker thread of its own, not on the main thread. torch's
``set_num_threads`` sets the OpenMP thread count of the thread that calls it, so a count set on
the main thread (``--threads``) does not reach the workers: `apply_threads` sets it there. And
parallel regions started from a thread other than the main one cost more to start (measured on
2 AVX-512 cores, torch 2.14.1: a 256x256 matmul 166 us on the main thread, 259 us on another;
the byte-level LM's decoding, hundreds of small operations a token, 3.5x slower on 2 threads
than on 1 there), so without ``--threads`` `pick_threads` times the model's own work on its
worker with torch's thread count and with 1, and keeps the faster."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class ThreadChoice:
    """The threads a worker runs torch on, and the medians (s) per count that chose them
    (none when ``--threads`` set the count)."""

    threads: int
    seconds: dict[int, float] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.seconds:
            return f"{self.threads} torch thread(s), as --threads says"
        measured = ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in self.seconds.items())
        return f"{self.threads} torch thread(s), the faster of {measured} (median of the model's own work)"


def apply_threads(threads: int) -> ThreadChoice:
    """Run torch on ``threads`` threads on the calling thread (an executor's initializer)."""
    torch.set_num_threads(threads)
    return ThreadChoice(threads)


def pick_threads(work: Callable[[], object], threads: int, repeats: int = 3) -> ThreadChoice:
    """Time ``work`` on the calling thread with ``threads`` threads and with 1 (in turn, after
    a warm-up each), and keep the faster count for this thread. ``threads`` is read on the main
    thread: a new thread's count can be the last one another worker set."""
    counts = list(dict.fromkeys([threads, 1]))
    times: dict[int, list[float]] = {n: [] for n in counts}
    for n in counts:
        torch.set_num_threads(n)
        work()
    for _ in range(repeats):
        for n in counts:
            torch.set_num_threads(n)
            start = time.perf_counter()
            work()
            times[n].append(time.perf_counter() - start)
    medians = {n: statistics.median(t) for n, t in times.items()}
    best = min(medians, key=medians.__getitem__)
    torch.set_num_threads(best)
    return ThreadChoice(best, medians)
