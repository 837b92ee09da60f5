"""State dicts read from files: a .safetensors file or a pickled torch checkpoint (read with
``torch.load(weights_only=True)``, never executing code), unwrapped from the checkpoint formats
that wrap one (``state_dict``, ``model``...; DDP's ``module.`` prefix); and tensors made fit for
saving as safetensors."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from zoo.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    InvalidArgumentError,
    WeightsError,
    WeightsNotFoundError,
    ZooError,
)
from zoo.store.files import check_zip_inflation

_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "state_dict_ema")
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP, torch.compile


def load_state_dict_file(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a state dict from a .safetensors file or a pickled torch checkpoint, on the CPU.

    Pickles are read with ``torch.load(weights_only=True)``: anything needing arbitrary code
    raises WeightsError instead of being executed.
    """
    path = Path(path)
    content = read_safetensors(path) if path.suffix == ".safetensors" else read_torch_file(path)
    try:
        return unwrap_state_dict(content)
    except InvalidArgumentError as error:
        raise WeightsError(f"{path}: {error}") from None


_TORCH_FIX = (
    "pass a torch checkpoint (.pt, .pth, .bin) or a .safetensors file; if this one should be, fetch or save it again"
)


def read_torch_file(
    path: str | os.PathLike, error: type[ZooError] = WeightsError, fix: str = _TORCH_FIX, kind: str = "checkpoint"
) -> Any:
    """What the pickled torch file ``path`` holds, read on the CPU with
    ``torch.load(weights_only=True)`` (never running code): the one reader of such files (weights,
    training checkpoints, tensor data files). Whatever fails (a missing file, a folder, text, a
    truncated zip, a pickle wanting code) is an ``error`` naming the file, what it should be
    (``kind``) and saying ``fix``."""
    path = Path(path)
    _check_file(path, error, f"torch {kind}")
    check_zip_inflation(path, error, f"torch.save never compresses; {fix}")
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # bytes that are no checkpoint fail in any way (KeyError, IndexError, EOFError...)
        wanted = re.search(r"GLOBAL ([\w.]+)", " ".join(str(err).split()))
        if isinstance(err, pickle.UnpicklingError) and wanted:
            raise error(
                f"{path} cannot be loaded with torch.load(weights_only=True): it would import {wanted.group(1)}, "
                f"which a plain {kind} never needs. zoo refuses to unpickle arbitrary code, so it does not load "
                f"such a {kind}. If you trust the file, re-save its tensors alone (plain tensors, lists and dicts, "
                f"or safetensors) and load that; if it is not a {kind}, it is corrupt: delete it and fetch it again"
            ) from None
        raise error(
            f"{path} is not a readable {kind} ({_reason(err)}): it is truncated, corrupt or another kind of file; {fix}"
        ) from None


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors file ``path``, on the CPU (see `open_safetensors`)."""
    with open_safetensors(path) as file:
        return {key: file.get_tensor(key) for key in file.keys()}


@contextlib.contextmanager
def open_safetensors(path: str | os.PathLike) -> Iterator[Any]:
    """The safetensors file ``path`` opened (memory-mapped: tensors are read when asked for): the
    one reader of such files. Whatever fails, on opening or reading (not a file, not safetensors,
    a header too large, truncated data), is a `WeightsError` naming the file."""
    path = Path(path)
    _check_file(path, WeightsError, "safetensors file")
    try:
        with safe_open(path, framework="pt", device="cpu") as file:
            yield file
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as err:
        if isinstance(err, ZooError):
            raise
        raise WeightsError(
            f"{path} is not a readable safetensors file ({_reason(err)}): it is truncated, corrupt or another "
            "kind of file. Delete it and fetch or save it again"
        ) from None


_NOT_FOUND = ((WeightsError, WeightsNotFoundError), (CheckpointError, CheckpointNotFoundError))


def _check_file(path: Path, error: type[ZooError], kind: str) -> None:
    """Refuse ``path`` unless it is a file (a link to one is followed)."""
    if not path.exists():
        missing = next((m for base, m in _NOT_FOUND if issubclass(error, base)), error)
        raise missing(f"Cannot load {path}: the file does not exist; check the path")
    if not path.is_file():
        raise error(f"{path} is not a file (a folder or a device): give the {kind} itself")


def _reason(error: Exception) -> str:
    """An exception's text in one short line: its type when it says little (KeyError: 101), the
    reason torch's weights-only unpickler gives without its advice (to turn weights_only off)."""
    text = " ".join(str(error).split())
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split(" Check the documentation", 1)[0].strip()
    text = text[:200]
    return f"{type(error).__name__}: {text}" if not isinstance(error, (RuntimeError, OSError)) or not text else text


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
