"""The Ray Serve deployment and application: ``inferd serve``'s repository in N replicas behind
Ray's HTTP proxy (fixed, or autoscaled on ongoing requests)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ray import serve

from inferd_serve_ray.replica import InferdReplica, Receive, Scope, Send


@serve.deployment
@serve.ingress()  # the ASGI app is the replica's own (__serve_build_asgi_app__)
class InferdDeployment(InferdReplica):
    """The deployment Ray runs in each replica."""

    def __serve_build_asgi_app__(self) -> Any:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await self.asgi(scope, receive, send)

        return app

    def record_routing_stats(self) -> dict[str, Any]:
        """Ray's routing stats of this replica: ``queue_depth`` (requests waiting in the models'
        schedulers), ``ongoing_requests`` (in this replica now), ``loaded_models`` (names)."""
        return self.routing_stats()

    def replica_actor_name(self) -> str:
        """This replica's Ray actor name (namespace ``serve``): ``ray.get_actor`` finds it."""
        return str(serve.get_replica_context().replica_id.to_full_id_str())


@dataclass
class RaySettings:
    """How the deployment scales: fixed ``replicas``, or autoscaled between ``min_replicas`` and
    ``max_replicas`` on ``target_ongoing_requests`` per replica."""

    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float = 4.0
    #: Requests Ray sends one replica at a time (Ray's default of 5 is low for a batching server).
    max_ongoing_requests: int = 64
    #: Models ``@serve.multiplexed`` keeps loaded per replica (the least recently used is unloaded).
    max_models_per_replica: int = 3
    replica_cpus: float = 1.0
    #: How often Ray asks each replica for its routing stats.
    routing_stats_period_s: float = 2.0
    name: str = "inferd"

    def deployment_options(self) -> dict[str, Any]:
        """``InferdDeployment.options(...)`` for these settings."""
        options: dict[str, Any] = {
            "name": self.name,
            "max_ongoing_requests": self.max_ongoing_requests,
            "ray_actor_options": {"num_cpus": self.replica_cpus},
            "request_router_config": {"request_routing_stats_period_s": self.routing_stats_period_s},
        }
        if self.min_replicas is None and self.max_replicas is None:
            options["num_replicas"] = self.replicas
        else:
            low = self.min_replicas if self.min_replicas is not None else 1
            options["autoscaling_config"] = {
                "min_replicas": low,
                "initial_replicas": max(low, min(self.replicas, self.max_replicas or self.replicas)),
                "max_replicas": self.max_replicas if self.max_replicas is not None else max(low, self.replicas),
                "target_ongoing_requests": self.target_ongoing_requests,
            }
        return options


def inferd_argv(rest: Sequence[str]) -> list[str]:
    """``inferd serve``'s flags: explicit model control with every model loaded at start, unless
    the flags choose (multiplexed model ids load and unload models: explicit control)."""
    argv = list(rest)
    if not any(a == "--model-control-mode" or a.startswith("--model-control-mode=") for a in argv):
        argv += ["--model-control-mode", "explicit"]
        if not any(a == "--load-model" or a.startswith("--load-model=") for a in argv):
            argv += ["--load-model", "*"]
    return argv


def application(argv: Sequence[str], settings: RaySettings | None = None) -> Any:
    """The Ray Serve application serving ``inferd serve ARGV``'s models (``serve.run`` it); ARGV
    as :func:`inferd_argv` completes it."""
    settings = settings or RaySettings()
    deployment: Any = InferdDeployment  # a ray.serve Deployment (the decorators' types hide it)
    deployment = deployment.options(**settings.deployment_options())
    return deployment.bind(inferd_argv(argv), settings.max_models_per_replica)


def build(args: Mapping[str, str]) -> Any:
    """The application builder ``serve run inferd_serve_ray:build inferd_args='--model-repository
    /models' replicas=2`` calls: ``inferd_args`` are ``inferd serve``'s flags (one string), any
    other key a :class:`RaySettings` field."""
    known = {f.name: f.type for f in fields(RaySettings)}
    unknown = sorted(set(args) - set(known) - {"inferd_args"})
    if unknown:
        raise ValueError(f"unknown argument {unknown[0]!r}: inferd_args or one of {', '.join(known)}")
    values: dict[str, Any] = {}
    for key, value in args.items():
        if key == "inferd_args":
            continue
        kind = str(known[key])
        values[key] = value if kind == "str" else (float(value) if "float" in kind else int(value))
    return application(shlex.split(args.get("inferd_args", "")), RaySettings(**values))
