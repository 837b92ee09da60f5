"""What each kind of model reads, from what a user hands zoo, checked before the model runs:
image sources (paths, folders, PIL images, uint8 pixel arrays) or a preprocessed float batch,
feature rows, texts, SMILES. Every refusal is an `InvalidArgumentError` naming the input by its
position and saying what the model takes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from zoo.errors import InvalidArgumentError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
MAX_ITEMS = 1_000_000  # inputs in one call


def as_list(inputs: Any) -> list[Any]:
    """One input or a sequence of them as a list (a string, a path, an image or an array is one)."""
    if isinstance(inputs, str | os.PathLike | Image.Image | np.ndarray | torch.Tensor | bytes):
        return [inputs]
    if isinstance(inputs, Sequence):
        return list(inputs)
    raise InvalidArgumentError(f"inputs must be one input or a list of them, got a {type(inputs).__name__}")


def strings(inputs: Any, kind: str) -> list[str]:
    """Texts or SMILES: a string or a list of strings, at least one."""
    items = as_list(inputs)
    bad = next((i for i, item in enumerate(items) if not isinstance(item, str)), None)
    if bad is not None:
        raise InvalidArgumentError(
            f"inputs[{bad}] is of type {type(items[bad]).__name__}; this model reads {kind} as strings"
        )
    return nonempty(items, kind)


def nonempty(items: list[Any], kind: str) -> list[Any]:
    if not items:
        raise InvalidArgumentError(f"no inputs: pass one or more {kind}")
    if len(items) > MAX_ITEMS:
        raise InvalidArgumentError(f"{len(items):,} inputs, more than {MAX_ITEMS:,} in one call; split them")
    return items


def image_items(inputs: Any) -> list[Any] | torch.Tensor:
    """Image sources one per image (a folder becomes its image files, sorted; uint8 pixels
    [N, H, W, C] or [N, H, W] its N images), or a preprocessed float batch as it is (`batch_of`)."""
    if isinstance(inputs, np.ndarray | torch.Tensor) and _is_float(inputs):
        return torch.as_tensor(inputs)
    items: list[Any] = []
    for item in as_list(inputs):
        if isinstance(item, str | os.PathLike) and Path(item).is_dir():
            items.extend(_folder_images(Path(item)))
        elif isinstance(item, np.ndarray | torch.Tensor) and _several_images(item):
            items.extend(np.asarray(item))  # N images of [H, W, C] or [H, W] pixels
        else:
            items.append(item)
    for i, item in enumerate(items):
        if not isinstance(item, str | os.PathLike | bytes | Image.Image | np.ndarray | torch.Tensor):
            raise InvalidArgumentError(
                f"inputs[{i}] is of type {type(item).__name__}; an image model reads image files, folders, PIL images, "
                "uint8 pixel arrays or a preprocessed float batch [N, C, H, W]"
            )
        if isinstance(item, np.ndarray | torch.Tensor) and (_is_float(item) or item.ndim not in (2, 3)):
            raise InvalidArgumentError(
                f"inputs[{i}] is an array of shape {tuple(item.shape)} ({item.dtype}); an image's pixels are uint8 "
                "[H, W] or [H, W, C] (a preprocessed float batch is passed whole, [N, C, H, W])"
            )
    return nonempty(items, "images")


def batch_of(array: Any, shape: Sequence[int], what: str, where: str | None = None, lone: bool = True) -> torch.Tensor:
    """``array`` as a float batch [N, *shape], finite; else the refusal naming the shape the model
    reads (``where`` names the model's input in it: a server's ``input 'input' of NAME``). With
    ``lone``, one sample without the batch dimension is taken as a batch of one."""
    prefix = f"{where}: " if where else ""
    try:
        tensor = torch.as_tensor(np.asarray(array, dtype=np.float32) if not isinstance(array, torch.Tensor) else array)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{prefix}this model reads {what} of shape [N, {', '.join(map(str, shape))}]: numbers, as nested lists "
            "of equal lengths"
        ) from None
    tensor = tensor.float()
    if lone and tuple(tensor.shape) == tuple(shape):
        tensor = tensor.unsqueeze(0)
    if tensor.ndim != len(shape) + 1 or tuple(tensor.shape[1:]) != tuple(shape):
        subject = where or f"this model's input ({what})"
        raise InvalidArgumentError(
            f"{subject} has shape [-1, {', '.join(map(str, shape))}] (-1: any size); got {list(tensor.shape)}"
        )
    if not len(tensor):
        raise InvalidArgumentError(f"{prefix}no inputs: pass one or more {what}")
    if len(tensor) > MAX_ITEMS:
        raise InvalidArgumentError(f"{prefix}{len(tensor):,} inputs, more than {MAX_ITEMS:,} in one call; split them")
    return check_finite(tensor, where)


def check_finite(batch: torch.Tensor, where: str | None = None) -> torch.Tensor:
    """``batch`` [N, ...] when every value is finite; else the refusal naming the first sample
    that is not (the one check of zoo.predict, zoo serve and the MLflow model)."""
    bad = (~torch.isfinite(batch.reshape(len(batch), -1))).any(-1).nonzero()
    if len(bad):
        prefix = f"{where}: " if where else ""
        raise InvalidArgumentError(f"{prefix}sample {int(bad[0])} holds NaN or infinite values; pass finite numbers")
    return batch


def _several_images(pixels: np.ndarray | torch.Tensor) -> bool:
    """uint8 pixels [N, H, W, C], or [N, H, W] (a last side that is no channel count: 1, 3 or 4)."""
    return pixels.ndim == 4 or (pixels.ndim == 3 and pixels.shape[-1] not in (1, 3, 4))


def _is_float(array: np.ndarray | torch.Tensor) -> bool:
    return bool(array.dtype.is_floating_point if isinstance(array, torch.Tensor) else array.dtype.kind == "f")


def _folder_images(folder: Path) -> list[Path]:
    found = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))
    if not found:
        raise InvalidArgumentError(f"{folder} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return found
