"""Devices: where a model is, a requested device checked before any work, what the CPU has."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from zoo.bounds import CPU_FEATURES_ENV, cpu_level
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


def resolve_device(requested: torch.device | str | None, *, cpu_only: bool = False) -> torch.device:
    """The device a command runs on: ``requested`` checked (`checked_device`), or, left out
    (None), the one default of every ``zoo`` command, "cuda if available, else cpu" (as
    TrainConfig's and Lightning's ``accelerator="auto"``); ``cpu_only``: the default is the CPU
    where the work can only run there (an ONNX export, a card's evaluation)."""
    if requested is not None:
        return checked_device(requested)
    return torch.device("cuda" if torch.cuda.is_available() and not cpu_only else "cpu")


# what each level of ZOO_CPU_FEATURES stands for: (torch's capability, native bf16, AMX, VNNI)
CPU_LEVELS: dict[str, tuple[str, bool, bool, bool]] = {
    "avx2": ("AVX2", False, False, False),
    "avx512": ("AVX512", False, False, False),
    "avx512_bf16": ("AVX512", True, False, True),
    "amx": ("AVX512", True, True, True),
}


@dataclass(frozen=True)
class CpuFeatures:
    """What the CPU can do, as every choice zoo makes by it reads it (precision candidates,
    int8 kernels, the speeds it expects): torch's ATen ``capability`` (``AVX2``, ``AVX512``),
    native ``bf16`` (AVX512-BF16 or AMX), ``amx`` tiles, ``vnni`` int8 dot products; and the
    `CPU_FEATURES_ENV` level they were set to, if any."""

    capability: str
    bf16: bool
    amx: bool
    vnni: bool
    override: str | None = None

    def __str__(self) -> str:
        shown = f"{self.capability}, native bf16 {_yes(self.bf16)}, AMX {_yes(self.amx)}, VNNI {_yes(self.vnni)}"
        return shown + (f" ({CPU_FEATURES_ENV}={self.override})" if self.override else "")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_features() -> CpuFeatures:
    """This CPU's features (`CpuFeatures`), or those of the level `CPU_FEATURES_ENV` names
    (``avx2``, ``avx512``, ``avx512_bf16``, ``amx``): a test or a benchmark makes zoo choose as
    it would on that CPU, whatever runs it (the kernels themselves stay this CPU's; pair it
    with ``ATEN_CPU_CAPABILITY`` to emulate a smaller one)."""
    level = cpu_level()
    if level is not None:
        return CpuFeatures(*CPU_LEVELS[level], override=level)
    flags = _cpuinfo()
    return CpuFeatures(
        torch.backends.cpu.get_cpu_capability(),
        bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "amx_tile" in flags,
        "avx512_vnni" in flags or "avx_vnni" in flags,
    )
