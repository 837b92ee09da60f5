"""`zoo serve` as Ray Serve replicas: the same ASGI app (routes, batching, limits, page,
metrics per replica) built inside each replica from a `ServeConfig`, behind Ray Serve's HTTP
proxy, which spreads requests over ``replicas`` copies. Needs ``pip install 'ray[serve]'``."""

from __future__ import annotations

import dataclasses
from typing import Any

from zoo.errors import InvalidArgumentError
from zoo.serve.application import create_app
from zoo.serve.serve_options import CPUS_PER_REPLICA, REPLICAS, ServeConfig, serve_config
from zoo.serve.server import ServerState

APP_NAME = "zoo"


class ZooReplica:
    """One replica: loads the models of its config when Ray starts it, then answers through
    the app `create_app` builds (Ray Serve runs its lifespan, so the batchers start)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(ServerState.load(self.config))


def ray_deployment(*models: str, replicas: int = 1, cpus_per_replica: float = 1.0, **options: Any) -> Any:
    """A Ray Serve application (``serve.run(...)`` it) of ``replicas`` copies of the server of
    ``models``; ``options`` are `ServeConfig`'s fields."""
    return deployment_of(serve_config(models, options, "zoo.serve.ray_deployment"), replicas, cpus_per_replica)


def deployment_of(config: ServeConfig, replicas: int, cpus_per_replica: float = 1.0) -> Any:
    """``replicas`` copies of the server of ``config``, each reserving ``cpus_per_replica`` CPUs
    and, unless ``config.threads`` says otherwise, running torch on as many threads."""
    try:
        from ray import serve
    except ImportError:
        raise InvalidArgumentError("zoo serve --ray needs Ray Serve: pip install 'ray[serve]'") from None
    for name, value, bounds in (
        ("replicas", replicas, REPLICAS),
        ("cpus_per_replica", cpus_per_replica, CPUS_PER_REPLICA),
    ):
        problem = bounds.problem(value)
        if problem:
            raise InvalidArgumentError(f"{name} {problem}, got {value!r}")
    if config.threads is None:
        config = dataclasses.replace(config, threads=max(1, int(cpus_per_replica)))
    deployment = serve.deployment(
        serve.ingress()(ZooReplica),
        name="zoo-serve",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica},
        graceful_shutdown_timeout_s=config.timeout_graceful_s,
        health_check_period_s=5,
    )
    return deployment.bind(config)


def run_ray(application: Any, host: str, port: int) -> None:
    """Start Ray Serve's proxy on ``host:port`` and deploy ``application`` at ``/`` (returns
    once its replicas are ready; they run in Ray's workers)."""
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    serve.run(application, name=APP_NAME, route_prefix="/")


def shutdown_ray() -> None:
    """Stop the application (each replica drains its requests first), Serve and Ray."""
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()
