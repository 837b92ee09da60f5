"""The ASGI app: `create_app` puts the routes (v2, v1, page, metrics, the OpenAPI schema)
behind the API key, a body size limit and the metrics middleware, and turns every refusal into
a 4xx JSON answer that names the problem (an unexpected failure into a 500 without a
traceback, which goes to the log). Open without the key: the server's liveness and readiness
(``/v2/health/live``, ``/v2/health/ready``) and the page's static shell, which say nothing of
the models."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

import zoo
from zoo.serve.metrics import MetricsMiddleware
from zoo.serve.request_errors import RequestError, internal_error, openai_error, too_large
from zoo.serve.routes import page, v1, v2
from zoo.serve.server import ServerState, state_of

log = logging.getLogger("zoo.serve")
OPENAI_ROUTES = ("/v1/completions", "/v1/models")


def require_key(request: Request) -> None:
    """401 unless the request carries ``Authorization: Bearer KEY`` (when the server has a key)."""
    key = state_of(request).config.api_key
    if key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), key.encode()):
        raise RequestError(401, "this server needs an API key: send the header 'Authorization: Bearer KEY'")


def create_app(state: ServerState) -> FastAPI:
    """The app serving ``state``'s models (the batchers start with the app's lifespan)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="zoo serve", version=zoo.__version__, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.server = state
    protected = [Depends(require_key)]
    app.include_router(v2.health)
    app.include_router(page.shell)
    for router in (v2.router, v1.router, page.router):
        app.include_router(router, dependencies=protected)
    app.add_api_route("/metrics", _metrics, methods=["GET"], dependencies=protected, tags=["metrics"])
    app.add_api_route("/openapi.json", _openapi, methods=["GET"], dependencies=protected, include_in_schema=False)
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected_error)
    app.add_middleware(BodyLimit, limit=state.config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    return app


async def _metrics(request: Request) -> Response:
    content, content_type = state_of(request).metrics.exposition()
    return Response(content, media_type=content_type)


async def _openapi(request: Request) -> JSONResponse:
    """The OpenAPI schema of the routes (FastAPI's own, served behind the key)."""
    return JSONResponse(request.app.openapi())


def error_response(request: Request, error: RequestError) -> JSONResponse:
    """``{"error": "message"}`` (the v2 protocol's), or OpenAI's error object on its routes."""
    openai = request.url.path in OPENAI_ROUTES
    body = {"error": openai_error(error) if openai else error.message}
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(body, status_code=error.status, headers=headers)


async def _request_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestError)  # internal: registered for RequestError only
    return error_response(request, error)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)  # internal: registered for HTTPException only
    message = {
        404: f"no route {request.method} {request.url.path}; see GET /v2 and the page at /",
        405: f"{request.url.path} does not take {request.method}",
    }.get(error.status_code, str(error.detail))
    return error_response(request, RequestError(error.status_code, message))


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)  # internal: registered for RequestValidationError only
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return error_response(request, RequestError(400, f"invalid request: {where}: {first.get('msg', 'invalid')}"))


async def _unexpected_error(request: Request, error: Exception) -> JSONResponse:
    log.exception("zoo serve: %s %s failed", request.method, request.url.path)
    return error_response(request, internal_error(error))


class BodyLimit:
    """413 for a request body over ``limit`` bytes: at once from its Content-Length, or once
    that many bytes of a chunked body have arrived."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limit:
            error = too_large(
                f"the request body is {length.decode('latin-1')} bytes; this server takes up to "
                f"{self.limit:,} (send fewer or smaller items per request)"
            )
            await JSONResponse({"error": error.message}, status_code=413)(scope, receive, send)
            return
        received = 0

        async def limited() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise too_large(f"the request body is over this server's limit of {self.limit:,} bytes")
            return message

        await self.app(scope, limited, send)
