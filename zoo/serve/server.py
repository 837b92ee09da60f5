"""`ServerState`: the served models, their batchers and worker threads, the metrics and the
limits; what every route reads from ``request.app.state.server``."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
from starlette.requests import Request

from zoo.deploy.exporter import example_input_for
from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import smiles_batch
from zoo.serve.batching import Batcher, tensor_batches
from zoo.serve.metrics import Metrics
from zoo.serve.models import ServedModel, load_served, served_name
from zoo.serve.protocol import CompletionRequest
from zoo.serve.request_errors import bad_request, not_found
from zoo.serve.routes.completion import MAX_WAITING, Completion, CompletionJob, run_completions
from zoo.serve.serve_options import ServeConfig
from zoo.serve.threads import ThreadChoice, apply_threads, pick_threads
from zoo.tokenizer import Continuation, complete_batch


class ServerState:
    def __init__(self, config: ServeConfig, models: list[ServedModel]) -> None:
        self.config, self.metrics = config, Metrics()
        self.models = {m.name: m for m in models}
        # one worker thread per model: a forward or a generation never waits for another model's;
        # --threads is set on each (torch's thread count belongs to the thread that sets it)
        initializer = {"initializer": apply_threads, "initargs": (config.threads,)} if config.threads else {}
        self.executors = {
            m.name: ThreadPoolExecutor(1, thread_name_prefix=f"zoo-serve-{m.name}", **initializer) for m in models
        }
        self.threads: dict[str, ThreadChoice] = {}  # what each worker runs torch on
        # torch's count on the thread that made the server: a thread torch has not met yet starts
        # with the count last set on any thread (a worker's, say), so stop() sets this one again
        self.threads_before = torch.get_num_threads()
        self.batchers: dict[str, Batcher] = {}
        self.started = False

    @classmethod
    def load(cls, config: ServeConfig) -> ServerState:
        """The models of ``config`` loaded (and optimized when asked, on ``config.threads``)."""
        names = [served_name(source) for source in config.models]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"two models would be served under one name: {names}; serve each once")
        before = torch.get_num_threads()
        if config.threads is not None:  # for zoo.optimize's measurements while loading; then each worker's
            torch.set_num_threads(config.threads)
        try:
            models = [load_served(source, config) for source in config.models]
        finally:
            torch.set_num_threads(before)
        return cls(config, models)

    async def start(self) -> None:
        """Choose each worker's threads, start the batchers (they need the running event loop)."""
        config = self.config
        loop = asyncio.get_running_loop()
        for name, served in self.models.items():
            if config.threads:
                self.threads[name] = ThreadChoice(config.threads)
            else:
                work, executor = self._work(served), self.executors[name]
                self.threads[name] = await loop.run_in_executor(executor, pick_threads, work, self.threads_before)
            print(f"zoo serve: {name} runs on {self.threads[name]}", file=sys.stderr)
        for name, served in self.models.items():
            observe = self.metrics.batch_size.labels(name).observe
            if served.kind == "text":  # completions of one sampling share a batch; each prompt is a row
                batcher: Batcher = Batcher(
                    functools.partial(run_completions, served), self.executors[name], config.max_batch, config.max_wait_ms,
                    min(config.max_queue, MAX_WAITING), observe,
                    key=CompletionJob.sampling, what="completions",
                )  # fmt: skip
            else:
                batcher = Batcher(
                    tensor_batches(served.forward), self.executors[name], config.max_batch, config.max_wait_ms,
                    config.max_queue, observe, size=lambda rows: rows.shape[0],
                )  # fmt: skip
            batcher.start()
            self.batchers[name] = batcher
        self.started = True

    def _work(self, served: ServedModel) -> Callable[[], object]:
        """A batch of the model's own work, for `pick_threads`: a forward of example inputs, or
        a short generation."""
        batch = min(self.config.max_batch, 8)
        if served.kind == "text":
            rows = [Continuation("def ", 8, seed=i) for i in range(batch)]
            return functools.partial(complete_batch, served.model, rows, temperature=0)
        if served.kind == "molecules":
            return functools.partial(served.forward, smiles_batch(["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"]))
        if served.kind == "texts":
            from zoo.serve.text_requests import text_outputs

            return functools.partial(text_outputs, served, ["a short text"] * batch)
        return functools.partial(served.forward, example_input_for(served.model, batch=batch))

    async def stop(self) -> None:
        self.started = False
        torch.set_num_threads(self.threads_before)
        for batcher in self.batchers.values():
            await batcher.stop()
        for executor in self.executors.values():
            executor.shutdown(wait=True)

    def get(self, name: str, kind: str | None = None) -> ServedModel:
        """The served model ``name`` (404 naming those served), of ``kind`` ("text" or
        "classifier") when given (400 pointing to the route that serves it)."""
        served = self.models.get(name)
        if served is None:
            raise not_found(f"no model {name!r} is served here; served: {', '.join(self.models)}")
        if kind == "text" and served.kind != "text":
            raise bad_request(
                f"{name} is a classifier, not a language model: use POST /v1/models/{name}:predict "
                f"or /v2/models/{name}/infer",
                param="model",
            )
        if kind == "classifier" and served.kind == "text":
            raise bad_request(f"{name} is a language model: use POST /v1/completions", param="model")
        return served

    async def classify(self, served: ServedModel, rows: torch.Tensor) -> torch.Tensor:
        """Class scores of ``rows`` (already checked against the model's input) through its batcher."""
        return await self.batchers[served.name].submit(rows)

    async def complete(
        self,
        served: ServedModel,
        request: CompletionRequest,
        prompt: str,
        emit: Callable[[str], None],
        cancelled: threading.Event,
    ) -> Completion:
        """One completion, batched with the others waiting for the model that sample alike."""
        result = await self.batchers[served.name].submit(CompletionJob(request, prompt, emit, cancelled))
        self.metrics.generated.labels(served.name).inc(result.completion_tokens)
        return result

    async def complete_all(
        self, served: ServedModel, request: CompletionRequest, prompts: list[str]
    ) -> list[Completion]:
        """Every prompt of ``request`` completed, unstreamed; they wait together, so they can
        share a batch (`check_request` bounds their count). When one prompt is refused (503),
        the others are withdrawn."""
        tasks = [
            asyncio.ensure_future(self.complete(served, request, p, lambda _: None, threading.Event())) for p in prompts
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise


def state_of(request: Request) -> ServerState:
    return request.app.state.server
