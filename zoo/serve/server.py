"""`ServerState`: the served models, their batchers and worker threads, the metrics and the
limits; what every route reads from ``request.app.state.server``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from starlette.requests import Request

from zoo.errors import InvalidArgumentError
from zoo.serve.batching import Batcher
from zoo.serve.completion import Completion, generate
from zoo.serve.config import ServeConfig
from zoo.serve.errors import RequestError, bad_request, not_found
from zoo.serve.metrics import Metrics
from zoo.serve.models import ServedModel, load_served, served_name
from zoo.serve.protocol import CompletionRequest

T = TypeVar("T")
MAX_WAITING_COMPLETIONS = 32


class ServerState:
    def __init__(self, config: ServeConfig, models: list[ServedModel]) -> None:
        self.config, self.metrics = config, Metrics()
        self.models = {m.name: m for m in models}
        # one worker thread per model: a forward or a generation never waits for another model's
        self.executors = {m.name: ThreadPoolExecutor(1, thread_name_prefix=f"zoo-serve-{m.name}") for m in models}
        self.batchers: dict[str, Batcher] = {}
        self.waiting_completions = 0
        self.started = False

    @classmethod
    def load(cls, config: ServeConfig) -> ServerState:
        """The models of ``config`` loaded (and optimized when asked), torch's threads set."""
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        names = [served_name(source) for source in config.models]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"two models would be served under one name: {names}; serve each once")
        return cls(config, [load_served(source, config) for source in config.models])

    async def start(self) -> None:
        """Start the batchers (they need the running event loop)."""
        for name, served in self.models.items():
            if served.kind != "text":
                batcher = Batcher(
                    served.forward,
                    self.executors[name],
                    self.config.max_batch,
                    self.config.max_wait_ms,
                    self.config.max_queue,
                    self.metrics.batch_size.labels(name).observe,
                )
                batcher.start()
                self.batchers[name] = batcher
        self.started = True

    async def stop(self) -> None:
        self.started = False
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
        """One completion on the model's worker thread (completions run one at a time)."""
        if self.waiting_completions >= MAX_WAITING_COMPLETIONS:
            raise RequestError(503, f"{self.waiting_completions} completions are waiting already; try again shortly")
        self.waiting_completions += 1
        try:
            result = await self.run(served, generate, served, request, prompt, emit, cancelled)
        finally:
            self.waiting_completions -= 1
        self.metrics.generated.labels(served.name).inc(result.completion_tokens)
        return result

    async def run(self, served: ServedModel, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executors[served.name], function, *args)


def state_of(request: Request) -> ServerState:
    return request.app.state.server
