"""zoo's convenience routes: ``POST /v1/models/{name}:predict`` (image files, JSON rows, SMILES
or texts in; the top-k classes, a regression's value in the target's units, or the labels
over their thresholds out, through the weights' own preprocessing: the answers of ``zoo
predict``), and for language models OpenAI's ``POST /v1/completions`` (streamed as
server-sent events with ``stream: true``) and ``GET /v1/models``."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from zoo.serve.inputs import image_rows, json_rows
from zoo.serve.models import ServedModel
from zoo.serve.protocol import TOP_K, CompletionRequest, PredictRequest, parse
from zoo.serve.request_errors import RequestError, bad_request, internal_error, openai_error, too_large, unsupported
from zoo.serve.routes.completion import Completion, check_request
from zoo.serve.server import ServerState, state_of
from zoo.serve.smiles_requests import predict_smiles
from zoo.serve.text_requests import predict_texts

log = logging.getLogger("zoo.serve")
router = APIRouter(tags=["v1"])
HOW_TO_SEND = 'send image files as a multipart form (curl -F image=@shirt.png) or JSON {"instances": [...]}'


def _refuse_another_kind(name: str, served: ServedModel, body: bytes) -> None:
    """A 400 that names the kind when a JSON body holds another kind's field (texts or SMILES
    sent to an image model), rather than pydantic's "instances: Field required"."""
    try:
        fields = json.loads(body)  # bounded by the server's body limit
    except ValueError:
        return
    sent = next((key for key in ("texts", "smiles") if isinstance(fields, dict) and key in fields), None)
    if sent is not None and "instances" not in fields:
        raise bad_request(f"{name} reads {served.kind}, and the body sends {sent}: {HOW_TO_SEND}", param=sent)


@router.post("/v1/models/{name}:predict")
async def predict(name: str, request: Request) -> dict[str, object]:
    """Multipart image files (any field name; ``top_k`` as a form field or query parameter), or
    JSON ``{"instances": [...], "top_k": 5}``."""
    state = state_of(request)
    served = state.get(name, kind="classifier")
    content_type = request.headers.get("content-type", "")
    if served.kind == "molecules":
        if content_type.startswith(("image/", "application/octet-stream", "multipart/form-data")):
            raise unsupported(
                f"the body is {content_type.split(';')[0]}, and {name} reads molecules: send JSON "
                '{"smiles": ["CCO", ...]}'
            )
        return await predict_smiles(served, await request.body())
    if served.kind == "texts":
        if not content_type.startswith("application/json"):
            raise unsupported(f"the body is {content_type.split(';')[0] or 'untyped'}, and {name} reads texts: send "
                              'JSON {"texts": ["...", ...]}')  # fmt: skip
        return await predict_texts(served, await request.body())
    limit = state.config.max_image_pixels
    if content_type.startswith(("image/", "application/octet-stream")):
        raise unsupported(f"the body is {content_type.split(';')[0]}: {HOW_TO_SEND}")
    if content_type.startswith("multipart/form-data"):
        form = await _form(request, state.config.max_batch)
        files = [(f.filename or key, await f.read()) for key, f in form.multi_items() if isinstance(f, UploadFile)]
        if not files:
            raise bad_request("the form holds no image file; send one or more files (e.g. curl -F image=@shirt.png)")
        top_k = _top_k(form.get("top_k") or request.query_params.get("top_k"))
        rows, names = await run_in_threadpool(image_rows, served, files, limit), [n for n, _ in files]
    else:
        raw = await request.body()
        try:
            body = parse(PredictRequest, raw)
        except RequestError:
            _refuse_another_kind(name, served, raw)
            raise
        top_k = body.top_k if request.query_params.get("top_k") is None else _top_k(request.query_params["top_k"])
        rows, names = await run_in_threadpool(json_rows, served, body.instances, limit), None
    predictions = served.answers(await state.classify(served, rows), top_k)  # classes, values or labels
    for prediction, file in zip(predictions, names or []):
        prediction["file"] = file
    return {"model": name, "predictions": predictions}


async def _form(request: Request, max_files: int) -> FormData:
    """The multipart form of up to ``max_files`` files (--max-batch): more is a 413, as a batch
    over the limit is elsewhere; a form that cannot be read a 400 saying how to send one."""
    try:
        return await request.form(max_files=max_files, max_fields=4)
    except HTTPException as error:  # starlette's words for a multipart limit or a malformed form
        if "Too many files" in str(error.detail):
            raise too_large(
                f"the form holds more than {max_files} files; this server classifies at most {max_files} images "
                "per request (--max-batch): send them in smaller requests"
            ) from None
        if "Too many fields" in str(error.detail):
            raise too_large("the form holds more than 4 fields besides its files: send image files and top_k") from None
        raise bad_request(f"the multipart form cannot be read ({error.detail}): {HOW_TO_SEND}") from None


def _top_k(value: object) -> int:
    """``top_k`` from a query parameter or a form field: a whole number within `TOP_K`."""
    text = str(value if value is not None else 5)
    number = int(text) if text.isdecimal() else text
    problem = TOP_K.problem(number)
    if problem:
        raise bad_request(f"top_k {problem}, got {text!r}", param="top_k")
    return int(number)


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, object]:
    """OpenAI's model list: every served model (completions take the language models)."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "zoo"} for name in state_of(request).models],
    }


@router.post("/v1/completions", response_model=None)
async def completions(request: Request) -> dict[str, object] | StreamingResponse:
    state = state_of(request)
    body = parse(CompletionRequest, await request.body())
    served = state.get(body.model, kind="text")
    prompts = check_request(served, body, state.config.max_tokens_limit)
    completion_id, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if body.stream:
        events = _stream(state, served, body, prompts, completion_id, created)
        return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-store"})
    results = await state.complete_all(served, body, prompts)
    choices = [
        _choice(i, (prompt if body.echo else "") + r.text, r.finish_reason)
        for i, (prompt, r) in enumerate(zip(prompts, results))
    ]
    used, made = sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results)
    return {
        **_envelope(completion_id, created, served.name, choices),
        "usage": {"prompt_tokens": used, "completion_tokens": made, "total_tokens": used + made},
    }


def _envelope(completion_id: str, created: int, model: str, choices: list[dict[str, object]]) -> dict[str, object]:
    return {"id": completion_id, "object": "text_completion", "created": created, "model": model, "choices": choices}


def _choice(index: int, text: str, finish_reason: str | None) -> dict[str, object]:
    return {"text": text, "index": index, "logprobs": None, "finish_reason": finish_reason}


async def _stream(
    state: ServerState,
    served: ServedModel,
    body: CompletionRequest,
    prompts: list[str],
    completion_id: str,
    created: int,
) -> AsyncIterator[str]:
    """Server-sent events: a chunk per piece of text as it is generated, a last one per prompt
    with its finish reason, then ``[DONE]``. A client that goes away stops the generation."""
    cancelled = threading.Event()

    def event(index: int, text: str, finish: str | None) -> str:
        return f"data: {json.dumps(_envelope(completion_id, created, served.name, [_choice(index, text, finish)]))}\n\n"

    try:
        for index, prompt in enumerate(prompts):
            if body.echo:
                yield event(index, prompt, None)
            emitter = _Emitter()
            pieces = _pieces(state.complete(served, body, prompt, emitter, cancelled), emitter)
            try:
                async for piece in pieces:
                    yield event(index, piece, None) if isinstance(piece, str) else event(index, "", piece.finish_reason)
            except Exception as error:  # the answer has started: the error goes as an event, as OpenAI's do
                if not isinstance(error, RequestError):
                    log.exception("zoo serve: a streamed completion of %s failed", served.name)
                failure = error if isinstance(error, RequestError) else internal_error(error)
                yield f"event: error\ndata: {json.dumps({'error': openai_error(failure)})}\n\n"
                return
        yield "data: [DONE]\n\n"
    finally:
        cancelled.set()


class _Emitter:
    """The worker thread's text, handed to the event loop's queue."""

    def __init__(self) -> None:
        self.loop, self.queue = asyncio.get_running_loop(), asyncio.Queue[str | None]()

    def __call__(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, text)


async def _pieces(completion: Awaitable[Completion], emitter: _Emitter) -> AsyncIterator[str | Completion]:
    """The text of ``completion`` as it comes, then the `Completion` itself."""
    task = asyncio.ensure_future(completion)
    task.add_done_callback(lambda _: emitter.queue.put_nowait(None))  # after the text: both go through the loop
    try:
        while (piece := await emitter.queue.get()) is not None:
            yield piece
        yield await task
    finally:
        task.cancel()
