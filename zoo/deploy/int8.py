"""Static int8 post-training quantization of the CNN families for `zoo.optimize`: PT2E
through torchao's x86 quantizer, then inductor with freezing."""

from __future__ import annotations

import pydoc
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from zoo.deploy.optimized import quiet_logger


def has_torchao() -> bool:
    """Whether torchao imports; its import logs a torch deprecation line (Enum constants for
    torch.compile) that says nothing to a zoo user, so that logger is quiet meanwhile."""
    with quiet_logger("torch.utils._pytree"):
        try:
            import torchao.quantization.pt2e  # noqa: F401
        except ImportError:
            return False
    return True


def quantize_int8(model: nn.Module, args: tuple[Any, ...], batches: list[tuple[Any, ...]]) -> Callable[..., Any]:
    """Static int8 post-training quantization: capture with ``torch.export`` (dynamic batch, so
    calibration batches and later calls may have any size), calibrate observers on
    ``batches``, convert, compile with inductor (freezing on)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    # a batch of one would be specialised (export fixes sizes 0 and 1): capture on two rows
    args = tuple(torch.cat([a, a]) if isinstance(a, torch.Tensor) and len(a) == 1 else a for a in args)
    dynamic = tuple({0: torch.export.Dim.AUTO} if isinstance(a, torch.Tensor) else None for a in args)
    with torch.no_grad():
        captured = torch.export.export(model, args, dynamic_shapes=dynamic).module()
    _mark_module_calls(captured)
    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(captured, quantizer)
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    # one graph per batch size: with freezing on, inductor's int8 convolutions recompiled for a
    # dynamic batch broke on their layout ("expected stride 1==784") in torch 2.14
    return torch.compile(convert_pt2e(prepared), backend="inductor", dynamic=False)


def _mark_module_calls(graph_module: torch.fx.GraphModule) -> None:
    """Give every node traced from a ``torch.nn`` layer a source entry of its own call.

    The x86 quantizer finds conv / add / ReLU patterns by the layer each node came from;
    ``torch.export`` records that layer by name only, so a ReLU module called twice in one
    block (torchvision's and zoo's ResNets) reads as one layer with two outputs and the
    quantizer refuses it. The per-call key of ``nn_module_stack`` tells the calls apart."""
    for node in graph_module.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op != "call_function" or not stack or node.meta.get("source_fn_stack"):
            continue
        call_key, (_, layer) = list(stack.items())[-1]
        if isinstance(layer, str):
            layer = pydoc.locate(layer) if layer.startswith("torch.nn.") else None
        if isinstance(layer, type):
            node.meta["source_fn_stack"] = [(call_key, layer)]
