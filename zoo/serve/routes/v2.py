"""Open Inference Protocol v2 over REST (KServe, Triton, MLServer): health, server and model
metadata, and inference with JSON tensors or the binary tensor extension, plus Triton's
classification extension (an output's top k as "score:index:label" strings). Classifiers take
``input`` (FP32, the preprocessed batch) and answer ``logits`` (a regression ``prediction`` in
the target's units; a multi-label model ``probabilities`` and ``decisions``, each probability
against its label's threshold); text classifiers take ``text`` (BYTES); language models take
``text_input`` (BYTES prompts) and answer ``text_output``, sampling options as parameters.
Server liveness and readiness are open (they say nothing of the models); everything else,
a model's own readiness included, is behind the API key when there is one."""

from __future__ import annotations

import json

import numpy as np
import torch
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

import zoo
from zoo.serve.inputs import checked_input
from zoo.serve.models import ServedModel
from zoo.serve.protocol import (
    TOP_K,
    CompletionRequest,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ServerMetadata,
    describe,
    parse,
)
from zoo.serve.request_errors import bad_request
from zoo.serve.routes.completion import check_request
from zoo.serve.routes.tensors import DATATYPES, HEADER_LENGTH, decode_inputs, encode_output, split_body
from zoo.serve.server import ServerState, state_of
from zoo.serve.smiles_requests import infer_smiles
from zoo.serve.text_requests import infer_texts

EXTENSIONS = ["binary_tensor_data", "classification", "model_repository(read)"]
SAMPLING = ("max_tokens", "temperature", "top_p", "top_k", "stop", "seed")  # a language model's parameters
PROTOCOL = ("binary_data_output", "sequence_id", "sequence_start", "sequence_end", "priority", "timeout")
health = APIRouter(tags=["v2 health"])
router = APIRouter(tags=["v2"])


@health.get("/v2/health/live")
async def live() -> dict[str, bool]:
    return {"live": True}


@health.get("/v2/health/ready")
async def ready(request: Request) -> Response:
    ok = state_of(request).started
    return Response(json.dumps({"ready": ok}), status_code=200 if ok else 503, media_type="application/json")


@router.get("/v2/models/{name}/ready")
@router.get("/v2/models/{name}/versions/{version}/ready")
async def model_ready(name: str, request: Request) -> dict[str, bool]:
    state = state_of(request)
    state.get(name)
    return {"ready": state.started}


@router.get("/v2")
async def server_metadata() -> ServerMetadata:
    return ServerMetadata(name="zoo", version=zoo.__version__, extensions=EXTENSIONS)


@router.get("/v2/models/{name}")
@router.get("/v2/models/{name}/versions/{version}")
async def model_metadata(name: str, request: Request) -> ModelMetadata:
    return state_of(request).get(name).metadata()


@router.post("/v2/models/{name}/infer")
@router.post("/v2/models/{name}/versions/{version}/infer")
async def infer(name: str, request: Request) -> Response:
    state = state_of(request)
    served = state.get(name)
    header, binary = split_body(await request.body(), request.headers.get(HEADER_LENGTH))
    inference = parse(InferenceRequest, header)
    arrays = decode_inputs(inference.inputs, binary)
    wanted = {spec.name: spec.datatype for spec in served.inputs}
    if set(arrays) != set(wanted):
        raise bad_request(f"{name} takes the input(s) {sorted(wanted)}; got {sorted(arrays)}")
    for item in inference.inputs:  # FP32 on a BYTES input would be read as the strings of its numbers
        if item.datatype != wanted[item.name]:
            raise bad_request(f"input {item.name!r} of {name} is {wanted[item.name]}; got {item.datatype}", item.name)
    if served.kind == "text":
        outputs = {"text_output": await _complete(state, served, inference, arrays["text_input"])}
    elif served.kind == "molecules":
        outputs = await infer_smiles(served, arrays["smiles"])
    elif served.kind == "texts":
        outputs = await infer_texts(served, arrays["text"])
    else:
        item = inference.inputs[0]
        rows = checked_input(served, arrays[item.name], item.datatype)
        outputs = served.v2_outputs(await state.classify(served, rows))
    return _response(served, inference, outputs)


async def _complete(
    state: ServerState, served: ServedModel, inference: InferenceRequest, prompts: np.ndarray
) -> np.ndarray:
    """``text_output``: each prompt continued, with the request's parameters as sampling options
    (one it does not know is refused, as /v1/completions refuses it)."""
    parameters = inference.parameters or {}
    unknown = sorted(set(parameters) - {*SAMPLING, *PROTOCOL})
    if unknown:
        raise bad_request(
            f"{served.name} takes no parameter {', '.join(map(repr, unknown))}; its sampling parameters: "
            f"{', '.join(SAMPLING)}",
            param=unknown[0],
        )
    options = {k: v for k, v in parameters.items() if k in SAMPLING}
    try:
        texts = [p.decode("utf-8") for p in prompts.ravel()]
        default = min(64, state.config.max_tokens_limit)  # new tokens when the request does not say
        request = CompletionRequest(**{"max_tokens": default, **options, "model": served.name, "prompt": texts})
    except UnicodeDecodeError:
        raise bad_request("text_input must be UTF-8 text", param="text_input") from None
    except ValidationError as error:
        raise bad_request(f"invalid parameters: {describe(error)}") from None
    check_request(served, request, state.config.max_tokens_limit)
    results = await state.complete_all(served, request, texts)
    return np.array([r.text.encode("utf-8") for r in results], dtype=object).reshape(prompts.shape)


def _response(served: ServedModel, inference: InferenceRequest, outputs: dict[str, np.ndarray]) -> Response:
    """The answer with the outputs asked for (all by default), JSON or binary as asked."""
    binary_default = _flag(inference.parameters, "binary_data_output", False)
    asked = inference.outputs or []
    unknown = [o.name for o in asked if o.name not in outputs]
    if unknown:
        raise bad_request(f"{served.name} has the output(s) {sorted(outputs)}; asked for {unknown}")
    parts, blobs = [], []
    for name, parameters in [(o.name, o.parameters or {}) for o in asked] or [(n, {}) for n in outputs]:
        _check_output_parameters(name, parameters)
        array = outputs[name]
        k = parameters.get("classification")
        if k is not None:
            array = _classification(served, name, array, k)
        part, raw = encode_output(name, array, _flag(parameters, "binary_data", binary_default))
        parts.append(part)
        blobs.append(raw)
    header = InferenceResponse(model_name=served.name, model_version="1", id=inference.id, outputs=parts)
    body = header.model_dump_json(exclude_none=True).encode()
    if not any(blobs):
        return Response(body, media_type="application/json")
    return Response(
        body + b"".join(blobs), media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(body))}
    )


OUTPUT_PARAMETERS = ("binary_data", "classification")


def _check_output_parameters(name: str, parameters: dict[str, object]) -> None:
    """A requested output's parameters are ones zoo answers (not silently dropped): Triton's
    client option ``class_count`` is ``classification`` in the protocol's JSON."""
    unknown = sorted(set(parameters) - set(OUTPUT_PARAMETERS))
    if unknown:
        hint = " (Triton's class_count is the parameter classification)" if "class_count" in unknown else ""
        raise bad_request(
            f"output {name!r}: unknown parameter {unknown[0]!r}{hint}; an output takes {', '.join(OUTPUT_PARAMETERS)}",
            param=unknown[0],
        )


def _classification(served: ServedModel, name: str, scores: np.ndarray, k: object) -> np.ndarray:
    if served.kind == "text" or scores.dtype not in DATATYPES or name not in ("logits", "probabilities"):
        raise bad_request("classification applies to a classifier's logits (a multi-label's probabilities) only")
    problem = TOP_K.problem(k)
    if problem:
        raise bad_request(f"classification (the number of classes to answer) {problem}, got {k!r}")
    top = torch.from_numpy(scores).topk(min(k, scores.shape[-1]), dim=-1)
    return np.array(
        [
            [f"{v:f}:{i}:{served.label(i)}".encode() for v, i in zip(values.tolist(), indices.tolist())]
            for values, indices in zip(top.values, top.indices)
        ],
        dtype=object,
    )


def _flag(parameters: dict[str, object] | None, name: str, default: bool) -> bool:
    """A true/false parameter (``binary_data``, ``binary_data_output``): a JSON boolean only."""
    value = (parameters or {}).get(name, default)
    if not isinstance(value, bool):
        raise bad_request(f"parameter {name} is true or false, got {value!r}", param=name)
    return value
