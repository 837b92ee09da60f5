"""A step function replayed as one CUDA graph (`GraphedStep`), for loops that call the same
step many times with the same shapes: generation's compiled decode step (generation.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

GRAPH_WARMUP_CALLS = 2  # calls run before one is captured (compiling, autotuning, allocating)


class GraphedStep:
    """``step(tokens, *args)`` replayed as one CUDA graph. A small model's decode step at batch 1
    is bound by launching its kernels (about 110 a token), which a replay launches as one. The
    first `GRAPH_WARMUP_CALLS` calls run as they are (compiling, autotuning, allocating); the next
    captures the step with ``tokens`` in a static buffer, and later calls replay it. The other
    arguments must be the same objects at every call: tensors the caller updates in place (cache
    slot, position, attention bias, keys and values) or constants. The output is overwritten by
    the next replay: the caller reads it first. Where capture fails, the step runs as it is,
    with a warning."""

    def __init__(self, step: Callable[..., torch.Tensor]) -> None:
        self.step = step
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.tokens: torch.Tensor | None = None
        self.output: torch.Tensor | None = None
        self.args: tuple[Any, ...] = ()

    def __call__(self, tokens: torch.Tensor, *args: Any) -> torch.Tensor:
        if self.graph is not None:
            if not _same(args, self.args):  # a replay would read the captured ones: a wrong answer, silently
                message = "GraphedStep: a replayed step takes the tensors it was captured with, updated in place"
                raise ValueError(message)  # internal: generate's loop passes the same tensors every step
            self.tokens.copy_(tokens)
            self.graph.replay()
            return self.output
        self.calls += 1
        if self.calls <= GRAPH_WARMUP_CALLS:
            return self.step(tokens, *args)
        if self.calls > GRAPH_WARMUP_CALLS + 1:  # capture failed: the compiled step alone
            return self.step(tokens, *args)
        return self._capture(tokens, *args)

    def _capture(self, tokens: torch.Tensor, *args: Any) -> torch.Tensor:
        self.tokens, self.args, graph = tokens.clone(), args, torch.cuda.CUDAGraph()
        try:
            # thread_local: other threads (a server's) keep working on the GPU meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.output = self.step(self.tokens, *args)
        except RuntimeError as error:
            warnings.warn(
                f"the step could not be captured as a CUDA graph ({error}); it runs without one",
                stacklevel=4,
            )
            return self.step(tokens, *args)
        self.graph = graph
        graph.replay()
        return self.output


def _same(args: tuple[Any, ...], captured: tuple[Any, ...]) -> bool:
    """The same tensors (the same objects: a graph reads their memory) and equal other values."""
    return len(args) == len(captured) and all(
        a is b if isinstance(b, torch.Tensor) else not isinstance(a, torch.Tensor) and a == b
        for a, b in zip(args, captured)
    )
