"""zoo's convenience routes: ``POST /v1/models/{name}:predict`` (image files or JSON rows in,
top-k class names and scores out, through the weights' own preprocessing: the numbers of
``zoo predict``), and for language models OpenAI's ``POST /v1/completions`` (streamed as
server-sent events with ``stream: true``) and ``GET /v1/models``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from zoo.serve.completion import Completion, check_request
from zoo.serve.errors import RequestError, bad_request, openai_error
from zoo.serve.inputs import image_rows, json_rows
from zoo.serve.models import ServedModel
from zoo.serve.protocol import CompletionRequest, PredictRequest, parse
from zoo.serve.server import ServerState, state_of

router = APIRouter(tags=["v1"])


@router.post("/v1/models/{name}:predict")
async def predict(name: str, request: Request) -> dict[str, object]:
    """Multipart image files (any field name; ``top_k`` as a form field or query parameter), or
    JSON ``{"instances": [...], "top_k": 5}``."""
    state = state_of(request)
    served = state.get(name, kind="classifier")
    limit = state.config.max_image_pixels
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form(max_files=state.config.max_batch, max_fields=4)
        files = [(f.filename or key, await f.read()) for key, f in form.multi_items() if isinstance(f, UploadFile)]
        if not files:
            raise bad_request("the form holds no image file; send one or more files (e.g. curl -F image=@shirt.png)")
        top_k = _top_k(form.get("top_k") or request.query_params.get("top_k"))
        rows, names = await run_in_threadpool(image_rows, served, files, limit), [n for n, _ in files]
    else:
        body = parse(PredictRequest, await request.body())
        top_k = body.top_k if request.query_params.get("top_k") is None else _top_k(request.query_params["top_k"])
        rows, names = await run_in_threadpool(json_rows, served, body.instances, limit), None
    probabilities = (await state.classify(served, rows)).softmax(dim=-1)
    top = probabilities.topk(min(top_k, probabilities.shape[-1]), dim=-1)
    predictions = [
        {"classes": [{"label": served.label(i), "index": i, "score": p} for p, i in zip(v.tolist(), ix.tolist())]}
        for v, ix in zip(top.values, top.indices)
    ]
    for prediction, file in zip(predictions, names or []):
        prediction["file"] = file
    return {"model": name, "predictions": predictions}


def _top_k(value: object) -> int:
    try:
        k = int(str(value if value is not None else 5))
    except ValueError:
        k = 0
    if k < 1:
        raise bad_request(f"top_k is a whole number, 1 or more; got {value!r}", param="top_k")
    return k


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
            except RequestError as error:  # the answer has started: the error goes as an event, as OpenAI's do
                yield f"event: error\ndata: {json.dumps({'error': openai_error(error)})}\n\n"
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
