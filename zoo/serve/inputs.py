"""Model inputs from what clients send: encoded images through the weights' own preprocessing
(`zoo.transforms`, as ``zoo predict``), each checked for size before it is decoded (a
decompression bomb is refused from its header), and arrays checked against the model's v2
input (datatype and shape)."""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import numpy as np
import torch
from PIL import Image

from zoo.errors import DataError, ZooError
from zoo.inference.items import check_finite
from zoo.loading.images import ImageTooLargeError, open_image
from zoo.serve.models import ServedModel, TensorSpec
from zoo.serve.protocol import ImageRow
from zoo.serve.request_errors import bad_request, too_large


def image_rows(served: ServedModel, images: list[tuple[str, bytes]], max_pixels: int) -> torch.Tensor:
    """The batch (N, C, H, W) of named encoded images, preprocessed for ``served``."""
    if served.kind != "images":
        raise bad_request(
            f"{served.name} reads {served.kind}, not images: send JSON rows of "
            f"{list(served.inputs[0].shape[1:])} numbers"
        )
    return torch.stack([served.preprocess(_decode(name, data, max_pixels)) for name, data in images])


def _decode(name: str, data: bytes, max_pixels: int) -> Image.Image:
    """A request's image through zoo's one image reader (`zoo.loading.images.open_image`)."""
    if not data:
        raise bad_request(f"{name} is empty; send the image file's bytes", param=name)
    try:
        return open_image(io.BytesIO(data), max_pixels=max_pixels, name=name)
    except ImageTooLargeError as error:
        raise too_large(f"{error}; this server decodes images of up to {max_pixels:,} pixels", name) from None
    except DataError as error:
        raise bad_request(f"{error}: send a PNG, JPEG, GIF, BMP or WebP file", param=name) from None


def json_rows(served: ServedModel, instances: list[list[Any] | ImageRow], max_pixels: int) -> torch.Tensor:
    """The batch of JSON rows: ``{"b64": ...}`` images, or model inputs as nested lists."""
    if all(isinstance(row, ImageRow) for row in instances):
        return image_rows(
            served, [(f"instances[{i}]", _b64(row.b64, i)) for i, row in enumerate(instances)], max_pixels
        )
    if any(isinstance(row, ImageRow) for row in instances):
        raise bad_request("instances mixes encoded images and number rows; send one kind per request", "instances")
    try:
        array = np.asarray(instances, dtype=np.float32)
    except (ValueError, TypeError):
        raise bad_request(
            f"instances must be rows of numbers, each of shape {list(served.inputs[0].shape[1:])}"
            " (nested lists of equal lengths)",
            param="instances",
        ) from None
    return checked_input(served.inputs[0], array, served.name)


def _b64(text: str, index: int) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"instances[{index}].b64 is not valid base64", param=f"instances[{index}]") from None


def checked_input(spec: TensorSpec, array: np.ndarray, model: str, datatype: str = "FP32") -> torch.Tensor:
    """``array`` as the model's input tensor, or a 400 naming the expected datatype or shape."""
    if datatype != spec.datatype:
        raise bad_request(f"input {spec.name!r} of {model} is {spec.datatype}; got {datatype}", param=spec.name)
    shape = list(array.shape)
    if len(shape) != len(spec.shape) or any(want not in (-1, got) for want, got in zip(spec.shape, shape)):
        raise bad_request(
            f"input {spec.name!r} of {model} has shape {list(spec.shape)} (-1: any size); got {shape}", param=spec.name
        )
    if shape[0] == 0:
        raise bad_request(f"input {spec.name!r} of {model} holds no rows", param=spec.name)
    tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    try:
        return check_finite(tensor)  # as zoo.predict and the MLflow model check it
    except ZooError as error:
        raise bad_request(f"input {spec.name!r} of {model}: {error}", param=spec.name) from None
