"""`zoo serve`'s options: `ServeConfig`, what the server runs (models, precision, batching) and
the limits that keep one client from taking the server down (body size, image pixels, prompt
length); `serve_config` builds one from `zoo.serve.app`'s arguments; the API key's source and
whether a host is this machine only."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zoo.bounds import Bounds, bounded, check_fields, count
from zoo.deploy.optimize_report import PRECISIONS  # the one list, as zoo predict's and zoo.optimize's
from zoo.errors import InvalidArgumentError

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
    max_batch: int = field(default=32, metadata=bounded(count(1, 4096)))
    max_wait_ms: float = field(default=5.0, metadata=bounded(Bounds(0, 60_000)))  # a minute at most
    api_key: str | None = None
    max_body_bytes: int = field(default=8 * 2**20, metadata=bounded(count(1, 2**31 - 1)))
    max_image_pixels: int = field(default=4096 * 4096, metadata=bounded(count(1, 2**28)))
    max_tokens_limit: int = field(default=256, metadata=bounded(count(1, 65_536)))  # new tokens per completion
    max_queue: int = field(default=1024, metadata=bounded(count(1, 2**20)))  # rows waiting per model; more get 503
    timeout_graceful_s: float = field(default=30.0, metadata=bounded(Bounds(0, 3600)))
    threads: int | None = field(default=None, metadata=bounded(count(1, 1024)))

    def __post_init__(self) -> None:
        problems = _type_problems(self)
        problems += ["name at least one model to serve, e.g. resnet20.fmnist"] if not self.models else []
        if self.optimize not in (None, *PRECISIONS):
            problems.append(f"optimize must be one of {', '.join(PRECISIONS)} or None, got {self.optimize!r}")
        problems += ["api_key is empty: pass a real key or none"] if self.api_key == "" else []
        if isinstance(self.api_key, str) and self.api_key != self.api_key.strip():
            problems.append("api_key starts or ends with white space, which no client's header can carry: strip it")
        if problems:
            raise InvalidArgumentError("; ".join(problems))
        check_fields(self, "ServeConfig", FLAGS)  # every number between both its bounds


# The command-line flag of each numeric field, for the errors (`zoo serve --help` shows them).
FLAGS = {
    "max_batch": "--max-batch",
    "max_wait_ms": "--max-wait-ms",
    "max_body_bytes": "--max-body-mb",
    "threads": "--threads",
}


MAX_BODY_MB = Bounds(0, 2047, low_open=True)  # --max-body-mb: max_body_bytes (below 2**31) in MiB
REPLICAS = count(1, 1024)  # --replicas, ray_deployment(replicas=)
CPUS_PER_REPLICA = Bounds(0, 1024, low_open=True)  # ray_deployment(cpus_per_replica=)


def flag_type(name: str) -> Callable[[str], int | float]:
    """The argparse ``type=`` of the flag for field ``name``: its bounds, declared once above."""
    return next(f for f in dataclasses.fields(ServeConfig) if f.name == name).metadata["bounds"].parse


def _type_problems(config: ServeConfig) -> list[str]:
    """What in ``config`` that is not a number has the wrong type (`check_fields` checks the numbers)."""
    if not isinstance(config.models, tuple | list):
        return [f"models is a tuple of weight names or folders, got {config.models!r}"]
    problems = [
        f"models holds weight names or folders (str or path), got {model!r}"
        for model in config.models
        if not isinstance(model, str | os.PathLike)
    ]
    for name in ("optimize", "api_key"):
        value = getattr(config, name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} must be a string or None, got {value!r}")
    return problems


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
    """The key from ``--api-key``, else from $ZOO_API_KEY, else None (no key needed); an empty
    one is refused (an unset shell variable, ``--api-key "$KEY"``, would serve without a key)."""
    for value, where in ((flag, "--api-key"), (os.environ.get(API_KEY_VARIABLE), API_KEY_VARIABLE)):
        if value is not None and not value.strip():
            raise InvalidArgumentError(
                f"{where} is empty, which would serve without a key: pass a real key, or leave out "
                f"--api-key and unset {API_KEY_VARIABLE} to serve without one"
            )
        if value is not None:
            return value
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
