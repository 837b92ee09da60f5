"""Model inputs from what clients send, prepared by the one predictor of ``zoo predict`` and
``zoo.predict`` (`zoo.inference.Predictor`, one per served model): encoded images decoded
through zoo's image reader, each checked for size before it is decoded (a decompression bomb is
refused from its header), and preprocessed as the weights were; arrays checked against the
model's input (datatype, shape, finite values). A refusal is the predictor's, as a 4xx the
client reads; the tensors of one request then wait in the model's batcher with the others."""

from __future__ import annotations

import base64
import binascii
import weakref
from typing import Any

import torch

from zoo.errors import DataError, ZooError
from zoo.inference import Predictor
from zoo.loading.images import ImageTooLargeError
from zoo.serve.models import ServedModel
from zoo.serve.protocol import ImageRow
from zoo.serve.request_errors import RequestError, bad_request, too_large

_PREDICTORS: dict[int, Predictor] = {}  # by the id of a served model, while it lives
IMAGE_FORMATS = "send a PNG, JPEG, GIF, BMP or WebP file"


def predictor_of(served: ServedModel) -> Predictor:
    """The predictor of ``served``, made once on its model (a classifier's, a regression's)."""
    found = _PREDICTORS.get(id(served))
    if found is None:
        found = _PREDICTORS[id(served)] = Predictor(served.model)
        weakref.finalize(served, _PREDICTORS.pop, id(served), None)  # its id is not reused while it is kept
    return found


def image_rows(served: ServedModel, images: list[tuple[str, bytes]], max_pixels: int) -> torch.Tensor:
    """The batch (N, C, H, W) of named encoded images, preprocessed for ``served``."""
    if served.kind != "images":
        raise bad_request(
            f"{served.name} reads {served.kind}, not images: send JSON rows of "
            f"{list(served.inputs[0].shape[1:])} numbers"
        )
    predictor = predictor_of(served)
    return predictor.collate([_decoded(predictor, name, data, max_pixels) for name, data in images])


def _decoded(predictor: Predictor, name: str, data: bytes, max_pixels: int) -> torch.Tensor:
    """A request's image through the predictor (zoo's one image reader, the weights' transforms)."""
    try:
        return predictor.sample(data, name, max_pixels)
    except ImageTooLargeError as error:
        raise too_large(f"{error}; this server decodes images of up to {max_pixels:,} pixels", name) from None
    except DataError as error:  # not an image zoo reads
        raise bad_request(f"{error}: {IMAGE_FORMATS}", param=name) from None
    except ZooError as error:
        raise bad_request(str(error), param=name) from None


def json_rows(served: ServedModel, instances: list[list[Any] | ImageRow], max_pixels: int) -> torch.Tensor:
    """The batch of JSON rows: ``{"b64": ...}`` images, or model inputs as nested lists."""
    if all(isinstance(row, ImageRow) for row in instances):
        return image_rows(
            served, [(f"instances[{i}]", _b64(row.b64, i)) for i, row in enumerate(instances)], max_pixels
        )
    if any(isinstance(row, ImageRow) for row in instances):
        raise bad_request("instances mixes encoded images and number rows; send one kind per request", "instances")
    return _numbers(served, instances, "instances")


def _b64(text: str, index: int) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"instances[{index}].b64 is not valid base64", param=f"instances[{index}]") from None


def checked_input(served: ServedModel, array: Any, datatype: str = "FP32") -> torch.Tensor:
    """A v2 request's ``array`` as the model's input tensor, or a 400 naming the expected
    datatype, shape or the first sample that is not finite."""
    spec = served.inputs[0]
    if datatype != spec.datatype:
        raise bad_request(f"input {spec.name!r} of {served.name} is {spec.datatype}; got {datatype}", param=spec.name)
    return _numbers(served, array, spec.name)


def _numbers(served: ServedModel, array: Any, param: str) -> torch.Tensor:
    """Rows of numbers (one sample each, the batch dimension always given) checked by the predictor."""
    try:
        return predictor_of(served).tensor(array, f"input {served.inputs[0].name!r} of {served.name}", lone=False)
    except RequestError:
        raise
    except ZooError as error:
        raise bad_request(str(error), param=param) from None
