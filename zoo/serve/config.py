"""`ServeConfig`: what `zoo serve` runs (models, precision, batching) and the limits that keep
one client from taking the server down (body size, image pixels, prompt length)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from zoo.errors import InvalidArgumentError

PRECISIONS = ("auto", "fp32", "bf16", "int8")
API_KEY_VARIABLE = "ZOO_API_KEY"


@dataclass(frozen=True)
class ServeConfig:
    """``models``: weight names or folders `zoo.save` / `zoo finetune` wrote. ``optimize``: run
    classifiers through `zoo.optimize` at this precision (None: eager). Requests arriving within
    ``max_wait_ms`` of the first one share one forward of up to ``max_batch`` rows
    (``max_batch=1`` serves one at a time). ``api_key``: every route but health then needs
    ``Authorization: Bearer KEY``. ``threads``: torch's intra-op threads for the forwards
    (process-wide; None leaves torch's default, one per core)."""

    models: tuple[str, ...]
    device: str = "cpu"
    optimize: str | None = None
    max_batch: int = 32
    max_wait_ms: float = 5.0
    api_key: str | None = None
    max_body_bytes: int = 8 * 2**20
    max_image_pixels: int = 4096 * 4096
    max_tokens_limit: int = 256  # new tokens per completion at most
    max_queue: int = 1024  # rows waiting for a forward at most, per model; more get 503
    timeout_graceful_s: float = 30.0
    threads: int | None = None

    def __post_init__(self) -> None:
        problems = [
            "name at least one model to serve, e.g. resnet20.fmnist" if not self.models else "",
            f"optimize must be one of {', '.join(PRECISIONS)} or None, got {self.optimize!r}"
            if self.optimize not in (None, *PRECISIONS)
            else "",
            f"max_batch must be 1 or more, got {self.max_batch}" if self.max_batch < 1 else "",
            f"max_wait_ms must be 0 or more, got {self.max_wait_ms}" if not self.max_wait_ms >= 0 else "",
            f"max_body_bytes must be 1 or more, got {self.max_body_bytes}" if self.max_body_bytes < 1 else "",
            "api_key is empty: pass a real key or none" if self.api_key == "" else "",
            f"threads must be 1 or more, got {self.threads}" if self.threads is not None and self.threads < 1 else "",
        ]
        if any(problems):
            raise InvalidArgumentError("; ".join(filter(None, problems)))


def api_key_from(flag: str | None) -> str | None:
    """The key from ``--api-key``, else from $ZOO_API_KEY, else None (no key needed)."""
    return flag or os.environ.get(API_KEY_VARIABLE) or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
