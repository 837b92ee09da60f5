"""`zoo serve`'s options: `ServeConfig`, what the server runs (models, precision, batching) and
the limits that keep one client from taking the server down (body size, image pixels, prompt
length); `serve_config` builds one from `zoo.serve.app`'s arguments; the API key's source and
whether a host is this machine only."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
from dataclasses import dataclass
from typing import Any

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
        wrong_types = _type_problems(self)
        if wrong_types:
            raise InvalidArgumentError("; ".join(wrong_types))
        problems = [
            "name at least one model to serve, e.g. resnet20.fmnist" if not self.models else "",
            f"optimize must be one of {', '.join(PRECISIONS)} or None, got {self.optimize!r}"
            if self.optimize not in (None, *PRECISIONS)
            else "",
            f"max_batch must be 1 or more, got {self.max_batch}" if self.max_batch < 1 else "",
            f"max_wait_ms must be 0 or more, got {self.max_wait_ms}" if not self.max_wait_ms >= 0 else "",
            f"max_body_bytes must be 1 or more, got {self.max_body_bytes}" if self.max_body_bytes < 1 else "",
            "api_key is empty: pass a real key or none" if self.api_key == "" else "",
            f"max_image_pixels must be 1 or more, got {self.max_image_pixels}" if self.max_image_pixels < 1 else "",
            f"max_tokens_limit must be 1 or more, got {self.max_tokens_limit}" if self.max_tokens_limit < 1 else "",
            f"max_queue must be 1 or more, got {self.max_queue}" if self.max_queue < 1 else "",
            f"timeout_graceful_s must be 0 or more, got {self.timeout_graceful_s}"
            if not self.timeout_graceful_s >= 0
            else "",
            f"threads must be 1 or more, got {self.threads}" if self.threads is not None and self.threads < 1 else "",
        ]
        if any(problems):
            raise InvalidArgumentError("; ".join(filter(None, problems)))


WHOLE_NUMBERS = ("max_batch", "max_body_bytes", "max_image_pixels", "max_tokens_limit", "max_queue")
NUMBERS = ("max_wait_ms", "timeout_graceful_s")


def _type_problems(config: ServeConfig) -> list[str]:
    """What in ``config`` has the wrong type (before the ranges are compared)."""
    if not isinstance(config.models, tuple | list):
        return [f"models is a tuple of weight names or folders, got {config.models!r}"]
    problems = [
        f"models holds weight names or folders (str or path), got {model!r}"
        for model in config.models
        if not isinstance(model, str | os.PathLike)
    ]
    whole = [name for name in WHOLE_NUMBERS if not _is_int(getattr(config, name))]
    whole += ["threads"] if config.threads is not None and not _is_int(config.threads) else []
    problems += [f"{name} must be a whole number, got {getattr(config, name)!r}" for name in whole]
    problems += [
        f"{name} must be a finite number, got {getattr(config, name)!r}"
        for name in NUMBERS
        if not _is_number(getattr(config, name))
    ]
    for name in ("optimize", "api_key"):
        value = getattr(config, name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} must be a string or None, got {value!r}")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def serve_config(models: tuple[str, ...], options: dict[str, Any], caller: str = "zoo.serve.app") -> ServeConfig:
    """The `ServeConfig` of ``caller``'s arguments: ``models``, and ``options`` naming its other
    fields (an unknown one is refused, naming those there are)."""
    known = [f.name for f in dataclasses.fields(ServeConfig) if f.name != "models"]
    if "models" in options:
        raise InvalidArgumentError(f"{caller} takes the models as positional arguments: {caller}('resnet20.fmnist')")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidArgumentError(f"{caller} has no option {', '.join(unknown)}; its options: {', '.join(known)}")
    return ServeConfig(models=tuple(models), **options)


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
