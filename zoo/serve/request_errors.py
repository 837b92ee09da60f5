"""The one error a request can get: `RequestError`, a `ZooError` with the HTTP status that
tells the client it was their request (4xx), rendered as JSON by the app's handler."""

from __future__ import annotations

from zoo.errors import ZooError


class RequestError(ZooError):
    """A request the server refuses: ``status`` is its 4xx code, the message names the problem
    and the fix (``param``: the field at fault, when there is one)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    @property
    def message(self) -> str:
        return str(self.args[0])


class MissingExtraError(ZooError, ImportError):
    """A package of the ``serve`` extra is not installed."""


def bad_request(message: str, param: str | None = None) -> RequestError:
    """400: the request's content is wrong (shape, datatype, value)."""
    return RequestError(400, message, param)


def not_found(message: str) -> RequestError:
    """404: no such model (or file of one)."""
    return RequestError(404, message)


def too_large(message: str, param: str | None = None) -> RequestError:
    """413: the body, an image or a batch is over the server's limit."""
    return RequestError(413, message, param)


def unsupported(message: str) -> RequestError:
    """415: a body of a kind the route does not read."""
    return RequestError(415, message)


def internal_error(error: BaseException) -> RequestError:
    """500 for a failure that is not the request's: named by its type only (the traceback goes
    to the server's log, never to the client)."""
    return RequestError(500, f"internal error ({type(error).__name__}); the server's log has the details")


def openai_error(error: RequestError) -> dict[str, object]:
    """The error object of OpenAI's API, which its clients read the message from."""
    kind = {401: "authentication_error", 404: "not_found_error", 503: "overloaded_error"}.get(
        error.status, "server_error" if error.status >= 500 else "invalid_request_error"
    )
    return {"message": error.message, "type": kind, "param": error.param, "code": None}
