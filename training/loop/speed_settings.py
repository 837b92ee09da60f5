"""The settings ``precision="auto"`` chooses among (`zoo.training.loop.speed`): a `Setting`
(autocast precision, channels_last, torch.compile, TF32) and the `candidates` worth measuring
on this device and these batches."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import torch

from zoo.devices import cpu_features


@dataclass(frozen=True)
class Setting:
    """How the Trainer runs its steps: autocast precision, NHWC memory format, torch.compile,
    TF32 matmuls (CUDA)."""

    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    tf32: bool = False

    @property
    def name(self) -> str:
        parts = [self.precision] + [n for n in ("tf32", "channels_last", "compile") if getattr(self, n)]
        return "+".join(parts)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Autocast to this setting's bf16/fp16 (nothing for fp32)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16 if self.precision == "bf16" else torch.float16)

    @classmethod
    def from_name(cls, name: str) -> Setting | None:
        """The setting a `name` spells, or None when it spells none (an edited cache file)."""
        precision, *flags = name.split("+")
        known = {"tf32", "channels_last", "compile"}
        if precision not in ("fp32", "bf16", "fp16") or not set(flags) <= known:
            return None
        return cls(precision, **{flag: True for flag in flags})


def candidates(
    device: torch.device, image: bool, fixed_shapes: bool, channels_last: bool | None, compile: bool | None
) -> tuple[list[Setting], dict[str, str]]:
    """The settings worth measuring here, the fp32 reference first, then cheapest to try and
    most promising first; and why the others are left out. A switch the user set is kept."""
    skipped: dict[str, str] = {}
    precisions = ["fp32"]
    if device.type == "cuda":
        precisions += (["bf16"] if torch.cuda.is_bf16_supported() else []) + ["fp16"]
    elif cpu_features().bf16:
        precisions.append("bf16")
    else:
        capability = cpu_features().capability
        skipped["bf16"] = f"this CPU ({capability}) has no native bf16 (no AVX512-BF16 or AMX): about 10x slower"
    layouts = [False, True] if image else [False]
    if channels_last is not None:
        layouts = [channels_last and image]
    compiles = [False, True] if fixed_shapes else [False]
    if compile is not None:
        compiles = [compile]
    elif not fixed_shapes:
        skipped["compile"] = "the batches change shape from one to the next (each shape would compile anew)"
    reference = Setting("fp32", layouts[0], compiles[0])
    settings = [reference]
    for compiled, precision, layout in itertools.product(compiles, reversed(precisions), reversed(layouts)):
        tf32s = [True, False] if device.type == "cuda" and precision == "fp32" else [False]
        settings += [Setting(precision, layout, compiled, tf32) for tf32 in tf32s]
    return list(dict.fromkeys(settings)), skipped
