"""Triton's API groups and the restricted-API flags (``--http-restricted-api``,
``--grpc-restricted-protocol``): ``<group>[,<group>...]:<key>=<value>``."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ApiGroup(str, enum.Enum):
    """The API groups of Triton's ``restricted_features.h``. Every route and RPC belongs to one,
    declared in its frontend's route table (``http/app.py``'s ``ROUTES``, ``grpc/service.py``'s
    ``RPCS``, the OpenAI frontend's ``app.ROUTES``)."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


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
            raise RestrictionError(
                f"{flag}={value}: expected <api>[,<api>...]:<key>=<value>, e.g. "
                "model-repository,logging:admin-key=secret"
            )
        for name in groups.split(","):
            group = parse_group(name, kind)
            if group in out:
                raise RestrictionError(
                    f"restricted {kind} '{group.value}' can not be specified in multiple config groups"
                )
            out[group] = Restriction(key.strip().lower(), secret)
    return out
