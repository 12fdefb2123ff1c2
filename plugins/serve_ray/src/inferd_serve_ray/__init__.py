"""inferd inside Ray Serve: ``inferd serve``'s repository served by Ray Serve replicas behind Ray's
HTTP proxy (KServe v2 and Triton's HTTP API), with multiplexed model ids mapped to inferd's model
loading, routing stats and autoscaling on ongoing requests. ``inferd-ray-serve`` starts it;
``serve run inferd_serve_ray:build`` runs it from Ray's own command line."""

from inferd_serve_ray.deployment import InferdDeployment, RaySettings, application, build

__all__ = ["InferdDeployment", "RaySettings", "application", "build"]
