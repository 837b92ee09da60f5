"""``zoo serve``: models as an HTTP service on FastAPI/uvicorn. Open Inference Protocol v2
(``/v2``, as KServe, Triton and MLServer speak it), top-k predictions (``/v1/models/NAME:predict``),
OpenAI-compatible completions for the byte-level LMs (``/v1/completions``), a page at ``/``,
Prometheus metrics at ``/metrics``; requests arriving together share one forward (dynamic
batching). Needs the ``serve`` extra: ``pip install 'zoo[serve]'``.

    >>> import zoo.serve, uvicorn
    >>> uvicorn.run(zoo.serve.app("resnet20.fmnist", max_batch=32), host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import importlib.util
from typing import Any

from zoo.serve.request_errors import MissingExtraError

_NEEDED = {"fastapi": "fastapi", "uvicorn": "uvicorn", "multipart": "python-multipart",
           "prometheus_client": "prometheus-client", "markdown": "markdown"}  # fmt: skip
_MISSING = [package for module, package in _NEEDED.items() if importlib.util.find_spec(module) is None]
if _MISSING:
    raise MissingExtraError(f"zoo serve needs {', '.join(_MISSING)}: pip install 'zoo[serve]'")

from fastapi import FastAPI  # noqa: E402 - after the check, which names what is missing

from zoo.serve.application import create_app  # noqa: E402
from zoo.serve.ray_serve import ray_deployment  # noqa: E402
from zoo.serve.serve_options import ServeConfig, serve_config  # noqa: E402
from zoo.serve.server import ServerState  # noqa: E402


def app(*models: str, **options: Any) -> FastAPI:
    """The ASGI app serving ``models`` (weight names or saved folders), loaded now; ``options``
    are `ServeConfig`'s fields (device, optimize, max_batch, max_wait_ms, api_key, limits)."""
    return create_app(ServerState.load(serve_config(models, options)))


__all__ = ["ServeConfig", "app", "create_app", "ray_deployment"]
