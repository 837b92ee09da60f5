"""State dicts read from files: a .safetensors file or a pickled torch checkpoint (read with
``torch.load(weights_only=True)``, never executing code), unwrapped from the checkpoint formats
that wrap one (``state_dict``, ``model``...; DDP's ``module.`` prefix); and tensors made fit for
saving as safetensors."""

from __future__ import annotations

import pickle
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from zoo.errors import InvalidArgumentError, WeightsError, WeightsNotFoundError

_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "state_dict_ema")
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP, torch.compile


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a state dict from a .safetensors file or a pickled torch checkpoint, on the CPU.

    Pickles are read with ``torch.load(weights_only=True)``: anything needing arbitrary code
    raises WeightsError instead of being executed.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsNotFoundError(f"Cannot load weights from {path}: the file does not exist.")
    if path.suffix == ".safetensors":
        try:
            return unwrap_state_dict(load_file(path, device="cpu"))
        except SafetensorError as err:
            raise WeightsError(
                f"{path} is not a readable safetensors file ({err}): it is truncated or corrupt. "
                "Delete it and fetch or save it again"
            ) from None
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise WeightsError(
            f"{path} cannot be loaded with torch.load(weights_only=True): {_refusal_reason(err)}. "
            "zoo refuses to unpickle arbitrary code, so it does not load such a checkpoint. If you trust the file, "
            "re-save its tensors as a plain state dict "
            "or as safetensors and load that; if it is not a checkpoint, it is corrupt: delete "
            "it and fetch it again."
        ) from err
    except (RuntimeError, EOFError) as err:
        raise WeightsError(
            f"Cannot read {path} as a torch checkpoint ({err}); it is corrupt or in another "
            "format: delete it and fetch it again."
        ) from err
    return unwrap_state_dict(obj)


def unwrap_state_dict(obj: Any) -> dict[str, torch.Tensor]:
    """The tensors of a state dict, or of a checkpoint that wraps one under ``state_dict``,
    ``model``, ``model_state_dict`` or ``state_dict_ema`` (first found, in that order).

    Non-tensor entries are dropped, and a ``module.`` (DDP) or ``_orig_mod.`` (torch.compile)
    prefix shared by every key is stripped.
    """
    while isinstance(obj, Mapping):
        inner = next((obj[k] for k in _WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise InvalidArgumentError(
            f"Expected a state dict (a mapping of names to tensors), got {type(obj).__name__}; "
            "save the model's state_dict() rather than the model."
        )
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise InvalidArgumentError(
            f"No tensors found in the checkpoint (its keys: {sorted(map(str, obj))[:10]}); "
            f"expected a state dict, possibly wrapped under one of {list(_WRAPPER_KEYS)}."
        )
    stripped = True
    while stripped:
        stripped = False
        for prefix in _WRAPPER_PREFIXES:
            if all(k.startswith(prefix) for k in tensors):
                tensors = {k[len(prefix) :]: v for k, v in tensors.items()}
                stripped = True
    return tensors


def standalone_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors safetensors can save: non-contiguous ones and ones sharing storage with another
    entry (tied weights, views) are cloned into their own contiguous memory."""
    owners = Counter(t.untyped_storage().data_ptr() for t in tensors.values())

    def standalone(t: torch.Tensor) -> torch.Tensor:
        if t.is_contiguous() and owners[t.untyped_storage().data_ptr()] == 1:
            return t
        return t.clone(memory_format=torch.contiguous_format)

    return {k: standalone(t) for k, t in tensors.items()}


def _refusal_reason(error: Exception) -> str:
    """What the pickle wanted, without torch's advice (to allowlist globals or turn weights_only off)."""
    text = " ".join(str(error).split())
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it would import {found.group(1)}, which a plain checkpoint never needs"
    reason = text.split("WeightsUnpickler error:", 1)[-1].strip()
    return (
        re.split(r"(?<=[.!?]) ", reason)[0].rstrip(".")
        if "weights_only" not in reason
        else "it holds more than tensors"
    )
