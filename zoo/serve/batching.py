"""Dynamic batching: requests that arrive within ``max_wait_ms`` of the first one waiting go
through one call of up to ``max_batch`` rows, on the model's own worker thread, while the
event loop goes on taking requests. ``max_batch=1`` serves them one at a time. Classifiers
batch row tensors (`tensor_batches`); language models batch completions whose sampling
options agree (``key``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from zoo.serve.request_errors import RequestError, too_large

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass
class _Job(Generic[In, Out]):
    item: In
    size: int
    future: asyncio.Future[Out]


def tensor_batches(
    forward: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """``forward`` over row batches: one call on their concatenation, split back per batch."""

    def run(batches: list[torch.Tensor]) -> list[torch.Tensor]:
        output = forward(torch.cat(batches) if len(batches) > 1 else batches[0])
        return list(output.split([b.shape[0] for b in batches]))

    return run


class Batcher(Generic[In, Out]):
    """Queues items for ``run`` (a list of items -> their outputs, in order) and answers each
    with its own output. ``size`` counts an item's rows (1 when not given); items batch
    together only while their ``key`` equals the first one's. ``on_batch`` hears each call's
    size (for the metrics); ``what`` names the rows in messages."""

    def __init__(
        self,
        run: Callable[[list[In]], list[Out]],
        executor: ThreadPoolExecutor,
        max_batch: int,
        max_wait_ms: float,
        max_queue: int,
        on_batch: Callable[[int], None] = lambda size: None,
        *,
        size: Callable[[In], int] = lambda item: 1,
        key: Callable[[In], Hashable] = lambda item: None,
        what: str = "rows",
    ) -> None:
        self.run, self.executor, self.on_batch = run, executor, on_batch
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000, max_queue
        self.size, self.key, self.what = size, key, what
        self._queue: asyncio.Queue[_Job[In, Out]] = asyncio.Queue()
        self._carried: _Job[In, Out] | None = None  # a job that did not fit the last batch
        self._waiting_rows = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="zoo-serve-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def submit(self, item: In) -> Out:
        """``run``'s output for ``item``, run in a batch with whatever else is waiting."""
        size = self.size(item)
        if size > self.max_batch:
            raise too_large(
                f"a request holds {size} {self.what}; this server runs at most {self.max_batch} "
                "per forward (--max-batch): send them in smaller requests"
            )
        if self._waiting_rows + size > self.max_queue:
            raise RequestError(503, f"{self._waiting_rows} {self.what} are waiting already; try again shortly")
        job: _Job[In, Out] = _Job(item, size, asyncio.get_running_loop().create_future())
        self._waiting_rows += size
        await self._queue.put(job)
        return await job.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect(loop)
            jobs = [j for j in jobs if not j.future.done()]  # a client that went away is not run
            if not jobs:
                continue
            self.on_batch(sum(j.size for j in jobs))
            try:
                outputs = await loop.run_in_executor(self.executor, self.run, [j.item for j in jobs])
            except Exception as error:  # every waiting request hears of it; the loop lives on
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error)
                continue
            for job, output in zip(jobs, outputs):
                if not job.future.done():
                    job.future.set_result(output)

    async def _collect(self, loop: asyncio.AbstractEventLoop) -> list[_Job[In, Out]]:
        """The next batch: the first job waiting, then those arriving before its wait is over,
        as long as they fit ``max_batch`` and share the first one's key."""
        first = self._carried or await self._queue.get()
        self._carried = None
        jobs, rows, key = [first], first.size, self.key(first.item)
        deadline = loop.time() + self.max_wait
        while rows < self.max_batch:
            try:
                job = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if rows + job.size > self.max_batch or self.key(job.item) != key:
                self._carried = job
                break
            jobs.append(job)
            rows += job.size
        self._waiting_rows -= rows
        return jobs
