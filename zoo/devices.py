"""Devices: where a model is, a requested device checked before any work, what the CPU has."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from zoo.errors import InvalidArgumentError


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s parameters (or, without any, its buffers) are; the CPU for a model with neither."""
    for tensor in [*model.parameters(), *model.buffers()]:
        return tensor.device
    return torch.device("cpu")


def checked_device(requested: torch.device | str) -> torch.device:
    """``requested`` as a device, refused by name when torch does not know it, or when it is
    a CUDA device and no GPU is usable here (before any weights are read)."""
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError):
        raise InvalidArgumentError(
            f"device={requested!r} is not a device torch knows; use 'cpu', or 'cuda' / 'cuda:N' for a GPU"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidArgumentError(
            f"device={str(requested)!r} asked for, but no CUDA GPU is usable here (torch.cuda.is_available() "
            "is False); use device='cpu'"
        )
    return device


def has_amx() -> bool:
    """Whether the CPU has AMX tiles (``amx_tile`` in /proc/cpuinfo; False where that file is missing)."""
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
