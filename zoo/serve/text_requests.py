"""Text classifiers (and text regressions, multi-label text models) fine-tuned on text rows, in
``zoo serve``: texts in, as ``POST /v1/models/NAME:predict`` with ``{"texts": [...]}`` or as
the v2 BYTES input ``text``, through the byte-level tokens of training (each text cut at the
model's context, 512 tokens at most) as the one predictor makes them (`zoo.inference`); the
same answers as ``zoo predict --input`` out. Each request is one forward, run in a worker
thread (as molecules' graphs are)."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from zoo.errors import ZooError
from zoo.serve.inputs import predictor_of
from zoo.serve.models import ServedModel
from zoo.serve.protocol import TOP_K, parse, within
from zoo.serve.request_errors import bad_request

MAX_TEXTS = 1_024  # texts per request, as SMILES per request


class TextsRequest(BaseModel):
    """``{"texts": ["great film", ...], "top_k": 5}`` (top_k: classifiers only)."""

    model_config = ConfigDict(extra="forbid")

    texts: list[str] = Field(min_length=1, max_length=MAX_TEXTS)
    top_k: Annotated[int, within(TOP_K)] = 5


def text_outputs(served: ServedModel, texts: list[str]) -> torch.Tensor:
    """The model's outputs [N, K] (float32, CPU) for ``texts``, tokenized by the predictor of
    ``zoo.predict`` (an empty text, with no token to read, is refused naming it: was a 500)."""
    predictor = predictor_of(served)
    try:
        batch = predictor.prepare(texts)
    except ZooError as error:
        raise bad_request(str(error), param="texts") from None
    return predictor.forward(batch)


async def predict_texts(served: ServedModel, body: bytes) -> dict[str, Any]:
    """The v1 answer: per text (in order) its top classes, value or labels over threshold."""
    request = parse(TextsRequest, body)
    outputs = await run_in_threadpool(text_outputs, served, request.texts)
    return {"model": served.name, "predictions": served.answers(outputs, request.top_k)}


async def infer_texts(served: ServedModel, array: np.ndarray) -> dict[str, np.ndarray]:
    """The v2 outputs for the BYTES input ``text`` (UTF-8 strings)."""
    if array.size > MAX_TEXTS:
        raise bad_request(f"text holds {array.size} texts, more than {MAX_TEXTS} per request; split them", "text")
    try:
        texts = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.ravel()]
    except UnicodeDecodeError:
        raise bad_request("text must be UTF-8 text", param="text") from None
    if not texts:
        raise bad_request("text holds no texts", param="text")
    return served.v2_outputs(await run_in_threadpool(text_outputs, served, texts))
