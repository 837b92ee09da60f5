"""The requests and answers of every route, as pydantic models: a request body is validated
against its model before anything runs (`parse`), so a malformed one gets a 400 naming the
field. Open Inference Protocol v2 (KServe, Triton, MLServer) for ``/v2``; OpenAI's completions
for ``/v1/completions``; zoo's own rows for ``/v1/models/{name}:predict``."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from zoo.bounds import INT_MAX, SEED, TEMPERATURE, TOP_K, TOP_P, Bounds, count
from zoo.errors import InvalidArgumentError
from zoo.serve.request_errors import bad_request

Model = TypeVar("Model", bound=BaseModel)
Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"
]
Parameters = dict[str, Any]


def within(bounds: Bounds) -> BeforeValidator:
    """A request field's check: a JSON number within ``bounds`` (zoo.bounds, the one place a
    numeric field's limits are declared), neither a string nor a boolean, nor coerced."""

    def check(value: Any) -> Any:
        problem = bounds.problem(value)
        if problem:  # a ValueError: pydantic reports it as the field's error (a 400 naming the field)
            raise InvalidArgumentError(f"{problem}, got {value!r}")
        return value

    return BeforeValidator(check)


# Every numeric field of every request, with both its bounds: these, and zoo.bounds' TEMPERATURE,
# TOP_P, TOP_K (completions' top_k, predict's top_k and v2's classification) and SEED; the server's
# own limits (--max-batch, max_tokens against the context) are checked on top of them.
DIMENSION = count(0, INT_MAX)  # v2 shape dimensions and binary_data_size
MAX_TOKENS = count(0, 65_536)  # ServeConfig.max_tokens_limit's highest
ONLY_ONE = count(1, 1)  # n, best_of: one completion per prompt
NO_PENALTY = Bounds(0, 0)  # presence_penalty, frequency_penalty: accepted when they ask for nothing


class RequestInput(BaseModel):
    """One input tensor: its data as (nested or flat) JSON, or after the JSON header when
    ``parameters.binary_data_size`` is given (the binary tensor extension)."""

    name: str
    shape: list[Annotated[int, within(DIMENSION)]] = Field(max_length=8)
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
    clients send by default (n=1, logprobs=None, presence_penalty=0, ...) are accepted when they
    ask for nothing, and a field it does not know is refused (not ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: str | list[str]
    max_tokens: Annotated[int, within(MAX_TOKENS)] = 16
    temperature: Annotated[float, within(TEMPERATURE)] = 1.0
    top_p: Annotated[float, within(TOP_P)] = 1.0
    top_k: Annotated[int, within(TOP_K)] | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    seed: Annotated[int, within(SEED)] | None = None
    n: Annotated[int, within(ONLY_ONE)] = 1
    echo: bool = False
    logprobs: None = None
    best_of: Annotated[int, within(ONLY_ONE)] | None = None
    suffix: None = None
    presence_penalty: Annotated[float, within(NO_PENALTY)] = 0.0
    frequency_penalty: Annotated[float, within(NO_PENALTY)] = 0.0
    logit_bias: dict[str, float] | None = Field(None, max_length=0)
    user: str | None = Field(None, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """A field sent as null takes its default, as OpenAI's API reads it."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class ImageRow(BaseModel):
    """An encoded image (PNG, JPEG, ...) inside a JSON row, as TensorFlow Serving's ``b64``."""

    model_config = ConfigDict(extra="forbid")

    b64: str


class PredictRequest(BaseModel):
    """Rows to classify: model inputs as nested lists (one sample each), or ``{"b64": ...}``
    encoded images for image models."""

    model_config = ConfigDict(extra="forbid")

    instances: list[list[Any] | ImageRow] = Field(min_length=1)
    top_k: Annotated[int, within(TOP_K)] = 5


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
        message = item["msg"].removeprefix("Value error, ")  # a `within` check's own words
        parts.append(f"{where}: {message}" if where else message)
    more = error.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
