"""``zoo serve``: load the models, then answer HTTP on uvicorn until SIGTERM or Ctrl-C; both
drain: requests in flight are answered before the process exits (0 after SIGTERM)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import uvicorn

from zoo.errors import InvalidArgumentError
from zoo.serve import ServeConfig, create_app
from zoo.serve.serve_options import api_key_from, is_loopback
from zoo.serve.server import ServerState


def run_serve(args: argparse.Namespace) -> int:
    if args.replicas != 1 and not args.ray:
        raise InvalidArgumentError(
            f"--replicas {args.replicas} runs copies of the server on Ray Serve: add --ray (without it, "
            "zoo serve runs one server)"
        )
    config = ServeConfig(
        models=tuple(args.models),
        device=args.device,
        optimize=args.optimize,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        api_key=api_key_from(args.api_key),
        max_body_bytes=int(args.max_body_mb * 2**20),
        threads=args.threads,
    )
    warning = exposure_warning(args.host, config.api_key)
    if warning:
        print(f"zoo serve: warning: {warning}", file=sys.stderr)
    print(f"zoo serve: loading {', '.join(config.models)}", file=sys.stderr)
    if args.ray:
        return _run_on_ray(config, args)
    app = create_app(ServerState.load(config))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level="info",
            timeout_graceful_shutdown=config.timeout_graceful_s,
            access_log=False,
        )
    )
    # uvicorn drains on SIGTERM, then raises it again under the handler it found: ignoring it then lets us exit 0
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if server.started else 1


def _run_on_ray(config: ServeConfig, args: argparse.Namespace) -> int:
    """``--ray``: a local Ray cluster, ``--replicas`` copies behind Ray Serve's proxy, until
    SIGTERM or Ctrl-C; then each replica drains and Ray stops."""
    import ray

    from zoo.serve.ray_serve import deployment_of, run_ray, shutdown_ray

    ray.init(include_dashboard=False)
    stop = threading.Event()  # handlers set after ray.init, which installs its own for SIGTERM
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        run_ray(deployment_of(config, args.replicas), args.host, args.port)
        print(f"zoo serve: {args.replicas} replica(s) on Ray Serve at http://{args.host}:{args.port}/", file=sys.stderr)
        stop.wait()
    finally:
        shutdown_ray()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """What to tell someone who binds beyond this machine without a key (None: nothing)."""
    if is_loopback(host) or api_key is not None:
        return None
    return (
        f"listening on {host} without an API key: anyone who can reach this machine can use the models; "
        "pass --api-key KEY (or set ZOO_API_KEY)"
    )
