"""`OptimizedModel`: a model's call run the way `zoo.optimize` chose, for inference only.

A compiled graph serves one batch size (in torch 2.14, inductor's frozen convolutions fail
when recompiled for a dynamic batch), and compiling one takes seconds to a minute. So a
compiled CNN compiles a graph for each of its first ``max_batch_graphs`` batch sizes, the
example's first; any other size runs on those graphs, split into chunks and padded, which its
outputs do not depend on (every sample of a CNN in eval mode is computed alone).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn as nn

from zoo.deploy.optimize_report import OptimizeReport
from zoo.devices import model_device
from zoo.errors import InvalidArgumentError

MAX_BATCH_GRAPHS = 4  # batch sizes a compiled CNN compiles a graph for; other sizes run on those
# dynamo's recompile limit (8) counts the graphs of every model of one class (they share
# ``forward``'s code): with this one, zoo's bounded graphs never push a model back to eager
_RECOMPILE_LIMIT = 256


class OptimizedModel(nn.Module):
    """The model's call, run the fastest measured way, for inference only (no gradients).
    Attributes other than the call (``pretrained_cfg``, ``num_classes``, ...) are the
    original model's, read through ``.model``. ``max_batch_graphs`` bounds the batch sizes a
    compiled CNN compiles a graph for (see the module docstring); ``graph_batch_sizes`` are
    those it has."""

    optimize_report: OptimizeReport

    def __init__(
        self,
        model: nn.Module,
        run: Callable[..., Any],
        channels_last: bool = False,
        autocast: torch.dtype | None = None,
        compiled: bool = False,
        example_batch: int | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.__dict__["_run"] = run  # outside the module tree: a compiled copy is no part of the state dict
        self._channels_last = channels_last
        self._compiled = compiled  # eager runs skip the inductor config patch, which costs ~0.1 ms a call
        self._autocast = autocast
        self.graph_batch_sizes: list[int] | None = None if example_batch is None else [example_batch]
        self.max_batch_graphs = MAX_BATCH_GRAPHS
        super().train(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._channels_last:
            args = tuple(_channels_last(a) for a in args)
        with ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            if self._compiled:
                stack.enter_context(_compile_settings(bounded=self.graph_batch_sizes is not None))
            if self._autocast is not None:
                stack.enter_context(torch.autocast(model_device(self.model).type, dtype=self._autocast))
                return _to_dtype(self._call(args, kwargs), torch.float32)
            return self._call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sizes = self.graph_batch_sizes
        batch = _batch_size(args)
        if sizes is None or kwargs or batch is None or batch in sizes:
            return self._run(*args, **kwargs)
        if batch == 0:  # nothing to pad from, nothing worth a graph
            return self.model(*args)
        if len(sizes) < self.max_batch_graphs:
            sizes.append(batch)
            return self._run(*args)
        return self._run_on_graphs(args, batch)

    def _run_on_graphs(self, args: tuple[Any, ...], batch: int) -> torch.Tensor:
        """``args``, a batch of ``batch`` samples, through the graphs compiled already: in
        chunks of the largest graph's size, the last one padded (its first sample repeated)
        to the smallest graph that holds it."""
        sizes = self.graph_batch_sizes
        largest = max(sizes)
        outputs = []
        for start in range(0, batch, largest):
            rows = min(largest, batch - start)
            size = min(s for s in sizes if s >= rows)
            chunk = tuple(_padded(a[start : start + rows], size) for a in args)
            if self._channels_last:  # the graphs were compiled for channels_last strides
                chunk = tuple(_channels_last(a) for a in chunk)
            outputs.append(self._run(*chunk)[:rows])
        return torch.cat(outputs)

    def train(self, mode: bool = True) -> OptimizedModel:
        if mode:
            raise InvalidArgumentError(
                "an optimized model runs inference only (compiled with frozen weights); "
                "fine-tune the original model (optimized.model) and optimize it again"
            )
        return super().train(False)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("model"), name)


def _channels_last(arg: Any) -> Any:
    return arg.contiguous(memory_format=torch.channels_last) if isinstance(arg, torch.Tensor) and arg.ndim == 4 else arg


def _compile_settings(bounded: bool) -> ExitStack:
    """Inductor's freezing (weights as constants: conv-bn folding, prepacked int8 weights) for
    the calls inside, and, for a model whose graphs zoo bounds (``bounded``), dynamo's
    recompile limit raised: inductor compiles lazily, on the first call of each shape, so the
    settings are scoped to the calls rather than to ``torch.compile``, and ``options=`` does
    not reach the int8 passes."""
    import torch._dynamo.config
    import torch._inductor.config

    stack = ExitStack()
    stack.enter_context(torch._inductor.config.patch(freezing=True))
    if bounded:
        stack.enter_context(torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT))
    # what compiling says that is torch's own business, not the user's: a CPU-only
    # machine's CUDA_HOME notice, and a tensor-copy warning inside inductor's int8 lowering
    stack.enter_context(quiet_logger("torch.utils.cpp_extension"))
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", message="To copy construct from a tensor", module=r"torch\._inductor")
    return stack


@contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` inside."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _batch_size(args: tuple[Any, ...]) -> int | None:
    """The batch size of a call whose arguments are all tensors with one dim-0 size, else None."""
    sizes = {a.shape[0] if isinstance(a, torch.Tensor) and a.ndim else None for a in args}
    return sizes.pop() if len(sizes) == 1 else None


def _padded(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """``tensor`` with its first row repeated at the end up to ``rows`` rows."""
    if len(tensor) == rows:
        return tensor
    return torch.cat([tensor, tensor[:1].expand(rows - len(tensor), *tensor.shape[1:])])


def _to_dtype(output: Any, dtype: torch.dtype) -> Any:
    """``output`` with its floating-point tensors in ``dtype`` (autocast's bf16 back to fp32)."""
    if isinstance(output, torch.Tensor):
        return output.to(dtype) if output.is_floating_point() else output
    if isinstance(output, Mapping):
        return type(output)({k: _to_dtype(v, dtype) for k, v in output.items()})
    if isinstance(output, (tuple, list)):
        return type(output)(_to_dtype(v, dtype) for v in output)
    return output
