"""The requests and answers of every route, as pydantic models: a request body is validated
against its model before anything runs (`parse`), so a malformed one gets a 400 naming the
field. Open Inference Protocol v2 (KServe, Triton, MLServer) for ``/v2``; OpenAI's completions
for ``/v1/completions``; zoo's own rows for ``/v1/models/{name}:predict``."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zoo.serve.errors import bad_request

Model = TypeVar("Model", bound=BaseModel)
Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"
]
Parameters = dict[str, Any]


class RequestInput(BaseModel):
    """One input tensor: its data as (nested or flat) JSON, or after the JSON header when
    ``parameters.binary_data_size`` is given (the binary tensor extension)."""

    name: str
    shape: list[int] = Field(max_length=8)
    datatype: Datatype
    parameters: Parameters | None = None
    data: list[Any] | None = None


class RequestOutput(BaseModel):
    """An output asked for: ``parameters.binary_data`` (bytes after the JSON header) and
    ``parameters.classification`` (Triton's classification extension: the top k as strings)."""

    name: str
    parameters: Parameters | None = None


class InferenceRequest(BaseModel):
    id: str | None = None
    parameters: Parameters | None = None
    inputs: list[RequestInput] = Field(min_length=1, max_length=16)
    outputs: list[RequestOutput] | None = None


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: Parameters | None = None
    data: list[Any] | None = None


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[ResponseOutput]


class TensorMetadata(BaseModel):
    name: str
    datatype: Datatype
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str] = []
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: Parameters = {}


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class CompletionRequest(BaseModel):
    """OpenAI's ``POST /v1/completions`` fields that a byte-level LM can honour; others that
    clients send by default (n=1, logprobs=None, ...) are accepted when they ask for nothing."""

    model_config = ConfigDict(extra="ignore")

    model: str
    prompt: str | list[str]
    max_tokens: int = Field(16, ge=0)
    temperature: float = Field(1.0, ge=0.0, le=100.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    # what torch's generators take: a seed they refuse would fail the whole batch it ran in
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    n: int = Field(1, ge=1, le=1)
    echo: bool = False
    logprobs: None = None
    best_of: int | None = Field(None, ge=1, le=1)
    suffix: None = None


class ImageRow(BaseModel):
    """An encoded image (PNG, JPEG, ...) inside a JSON row, as TensorFlow Serving's ``b64``."""

    model_config = ConfigDict(extra="forbid")

    b64: str


class PredictRequest(BaseModel):
    """Rows to classify: model inputs as nested lists (one sample each), or ``{"b64": ...}``
    encoded images for image models."""

    instances: list[list[Any] | ImageRow] = Field(min_length=1)
    top_k: int = Field(5, ge=1)


def parse(model: type[Model], body: bytes | str) -> Model:
    """``body`` as ``model``, or a 400 naming the first fields at fault (malformed JSON too)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        where = error.errors(include_url=False)[0]["loc"] if error.error_count() else ()
        raise bad_request(f"invalid request body: {describe(error)}", param=str(where[0]) if where else None) from None


def describe(error: ValidationError, limit: int = 3) -> str:
    """pydantic's errors as one line: ``field.path: message`` for the first ``limit``."""
    parts = []
    for item in error.errors(include_url=False)[:limit]:
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}" if where else item["msg"])
    more = error.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
