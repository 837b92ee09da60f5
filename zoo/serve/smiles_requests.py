"""Models fine-tuned on molecules in ``zoo serve``: SMILES in, as ``POST
/v1/models/NAME:predict`` with ``{"smiles": [...]}`` or as the v2 BYTES input ``smiles``, made
graphs by the featurizer of training (`zoo.loading.smiles`) through the one predictor
(`zoo.inference`); a regression's value (in the target's units) or a classifier's top classes
out. A SMILES RDKit cannot read is a 400 naming it. Graph batches skip the tensor batcher: each
request is one forward, run in a worker thread."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import MAX_PREDICT_SMILES
from zoo.serve.inputs import predictor_of
from zoo.serve.models import ServedModel
from zoo.serve.protocol import TOP_K, parse, within
from zoo.serve.request_errors import bad_request


class SmilesRequest(BaseModel):
    """``{"smiles": ["CCO", ...], "top_k": 5}`` (top_k: classifiers only)."""

    model_config = ConfigDict(extra="forbid")

    smiles: list[str] = Field(min_length=1, max_length=MAX_PREDICT_SMILES)
    top_k: Annotated[int, within(TOP_K)] = 5


def molecule_outputs(served: ServedModel, smiles: list[str], where: str) -> torch.Tensor:
    """The model's outputs [N, K] (float32, CPU) for ``smiles``, made graphs by the predictor of
    ``zoo.predict``; a bad SMILES is a 400 naming it."""
    if len(smiles) > MAX_PREDICT_SMILES:
        raise bad_request(f"{where}: {len(smiles)} SMILES, more than {MAX_PREDICT_SMILES} at once; split them", where)
    predictor = predictor_of(served)
    try:
        batch = predictor.prepare(smiles, where)
    except InvalidArgumentError as error:
        raise bad_request(str(error), param=where) from None
    return predictor.forward(batch)


async def predict_smiles(served: ServedModel, body: bytes) -> dict[str, Any]:
    """The v1 answer: per SMILES its value (regression) or its top classes."""
    request = parse(SmilesRequest, body)
    outputs = await run_in_threadpool(molecule_outputs, served, request.smiles, "smiles")
    answers = served.answers(outputs, request.top_k)  # a value, top classes or labels over threshold
    predictions = [{"smiles": text, **answer} for text, answer in zip(request.smiles, answers)]
    return {"model": served.name, "predictions": predictions}


async def infer_smiles(served: ServedModel, array: np.ndarray) -> dict[str, np.ndarray]:
    """The v2 outputs for the BYTES input ``smiles`` (UTF-8 strings)."""
    try:
        smiles = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.ravel()]
    except UnicodeDecodeError:
        raise bad_request("smiles must be UTF-8 text", param="smiles") from None
    return served.v2_outputs(await run_in_threadpool(molecule_outputs, served, smiles, "smiles"))
