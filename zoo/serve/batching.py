"""Dynamic batching: requests that arrive within ``max_wait_ms`` of the first one waiting go
through one forward of up to ``max_batch`` rows, on the model's own worker thread, while the
event loop goes on taking requests. ``max_batch=1`` serves them one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from zoo.serve.errors import RequestError, too_large


@dataclass
class _Job:
    rows: torch.Tensor
    future: asyncio.Future[torch.Tensor]


class Batcher:
    """Queues row batches for ``forward`` and answers each with its own rows of the output.
    ``on_batch`` hears each forward's size (for the metrics)."""

    def __init__(
        self,
        forward: Callable[[torch.Tensor], torch.Tensor],
        executor: ThreadPoolExecutor,
        max_batch: int,
        max_wait_ms: float,
        max_queue: int,
        on_batch: Callable[[int], None] = lambda size: None,
    ) -> None:
        self.forward, self.executor, self.on_batch = forward, executor, on_batch
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000, max_queue
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._carried: _Job | None = None  # a job that did not fit the last batch
        self._waiting_rows = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="zoo-serve-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def submit(self, rows: torch.Tensor) -> torch.Tensor:
        """``forward`` of ``rows`` (N, ...), run in a batch with whatever else is waiting."""
        if rows.shape[0] > self.max_batch:
            raise too_large(
                f"a request holds {rows.shape[0]} rows; this server runs at most {self.max_batch} "
                "per forward (--max-batch): send them in smaller requests"
            )
        if self._waiting_rows + rows.shape[0] > self.max_queue:
            raise RequestError(503, f"{self._waiting_rows} rows are waiting already; try again shortly")
        job = _Job(rows, asyncio.get_running_loop().create_future())
        self._waiting_rows += rows.shape[0]
        await self._queue.put(job)
        return await job.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect(loop)
            jobs = [j for j in jobs if not j.future.done()]  # a client that went away is not run
            if not jobs:
                continue
            self.on_batch(sum(j.rows.shape[0] for j in jobs))
            try:
                outputs = await loop.run_in_executor(self.executor, self._forward, [j.rows for j in jobs])
            except Exception as error:  # every waiting request hears of it; the loop lives on
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error)
                continue
            for job, output in zip(jobs, outputs):
                if not job.future.done():
                    job.future.set_result(output)

    async def _collect(self, loop: asyncio.AbstractEventLoop) -> list[_Job]:
        """The next batch: the first job waiting, then those arriving before its wait is over,
        as long as they fit ``max_batch``."""
        first = self._carried or await self._queue.get()
        self._carried = None
        jobs, rows = [first], first.rows.shape[0]
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
            if rows + job.rows.shape[0] > self.max_batch:
                self._carried = job
                break
            jobs.append(job)
            rows += job.rows.shape[0]
        self._waiting_rows -= rows
        return jobs

    def _forward(self, batches: list[torch.Tensor]) -> list[torch.Tensor]:
        output = self.forward(torch.cat(batches) if len(batches) > 1 else batches[0])
        return list(output.split([b.shape[0] for b in batches]))
