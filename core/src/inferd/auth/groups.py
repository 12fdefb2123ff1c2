"""Triton's API groups and the restricted-API flags (``--http-restricted-api``,
``--grpc-restricted-protocol``): ``<group>[,<group>...]:<key>=<value>``."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ApiGroup(str, enum.Enum):
    """The API groups of Triton's ``restricted_features.h``; every route belongs to one."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


#: gRPC method name -> its group (both services: inference and grpc.health.v1).
RPC_GROUPS: dict[str, ApiGroup] = {
    "ServerLive": ApiGroup.HEALTH,
    "ServerReady": ApiGroup.HEALTH,
    "ModelReady": ApiGroup.HEALTH,
    "Check": ApiGroup.HEALTH,
    "ServerMetadata": ApiGroup.METADATA,
    "ModelMetadata": ApiGroup.METADATA,
    "ModelInfer": ApiGroup.INFERENCE,
    "ModelStreamInfer": ApiGroup.INFERENCE,
    "ModelConfig": ApiGroup.MODEL_CONFIG,
    "ModelStatistics": ApiGroup.STATISTICS,
    "RepositoryIndex": ApiGroup.MODEL_REPOSITORY,
    "RepositoryModelLoad": ApiGroup.MODEL_REPOSITORY,
    "RepositoryModelUnload": ApiGroup.MODEL_REPOSITORY,
    "ModelTraffic": ApiGroup.MODEL_REPOSITORY,
    "TraceSetting": ApiGroup.TRACE,
    "LogSettings": ApiGroup.LOGGING,
    **{f"{kind}SharedMemory{op}": ApiGroup.SHARED_MEMORY
       for kind in ("System", "Cuda") for op in ("Status", "Register", "Unregister")},
}  # fmt: skip

#: HTTP endpoint name (``app.ROUTES``' third column, ``infer`` for the infer routes) -> its group.
ROUTE_GROUPS: dict[str, ApiGroup] = {
    "live": ApiGroup.HEALTH,
    "ready": ApiGroup.HEALTH,
    "model_ready": ApiGroup.HEALTH,
    "server_metadata": ApiGroup.METADATA,
    "model_metadata": ApiGroup.METADATA,
    "infer": ApiGroup.INFERENCE,
    "generate": ApiGroup.INFERENCE,
    "generate_stream": ApiGroup.INFERENCE,
    "model_config": ApiGroup.MODEL_CONFIG,
    "model_stats": ApiGroup.STATISTICS,
    "repository_index": ApiGroup.MODEL_REPOSITORY,
    "load": ApiGroup.MODEL_REPOSITORY,
    "unload": ApiGroup.MODEL_REPOSITORY,
    "usage": ApiGroup.MODEL_REPOSITORY,  # every tenant's requests and tokens: an administrator's view
    "traffic_get": ApiGroup.MODEL_REPOSITORY,
    "traffic_post": ApiGroup.MODEL_REPOSITORY,
    "trace_get": ApiGroup.TRACE,
    "trace_post": ApiGroup.TRACE,
    "logging_get": ApiGroup.LOGGING,
    "logging_post": ApiGroup.LOGGING,
    "shm_status": ApiGroup.SHARED_MEMORY,
    "shm_register": ApiGroup.SHARED_MEMORY,
    "shm_unregister": ApiGroup.SHARED_MEMORY,
}


class RestrictionError(ValueError):
    """A restricted-API flag value Triton would refuse (Triton's sentence)."""


@dataclass(frozen=True)
class Restriction:
    """Requests to a restricted group must carry header ``key`` (lowercase) with ``value``."""

    key: str
    value: str


def parse_group(name: str, kind: str = "api") -> ApiGroup:
    """``inference`` -> :attr:`ApiGroup.INFERENCE`; an unknown name raises Triton's sentence
    (``kind``: "api" for HTTP, "protocol" for gRPC, as Triton words its flags)."""
    try:
        return ApiGroup(name.strip())
    except ValueError:
        known = ", ".join(g.value for g in ApiGroup)
        raise RestrictionError(f"unknown restricted {kind} '{name.strip()}' (the groups are: {known})") from None


def parse_restrictions(values: list[str], flag: str, kind: str = "api") -> dict[ApiGroup, Restriction]:
    """Every ``<groups>:<key>=<value>`` of one flag, by group; a group may appear in one only
    (``kind``: "api" for --http-restricted-api, "protocol" for --grpc-restricted-protocol)."""
    out: dict[ApiGroup, Restriction] = {}
    for value in values:
        groups, colon, pair = value.partition(":")
        key, eq, secret = pair.partition("=")
        if not colon or not eq or not groups.strip() or not key.strip():
            raise RestrictionError(f"{flag}={value}: expected <api>[,<api>...]:<key>=<value>, e.g. "
                                   "model-repository,logging:admin-key=secret")  # fmt: skip
        for name in groups.split(","):
            group = parse_group(name, kind)
            if group in out:
                raise RestrictionError(
                    f"restricted {kind} '{group.value}' can not be specified in multiple config groups"
                )
            out[group] = Restriction(key.strip().lower(), secret)
    return out
