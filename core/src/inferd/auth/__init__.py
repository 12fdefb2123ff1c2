"""Access control: Triton's restricted API groups, API keys and tenants, per-tenant limits.

Frontends hold ``dataplane.access`` (an :class:`AccessControl`, or ``None`` when no flag asks
for any of this: then the one check on the request path is that attribute). A frontend takes its
protocol's :class:`AccessPolicy` (``access.http``, ``access.grpc``, or ``access.policy(name)`` for a
plugin's own protocol, e.g. the OpenAI frontend) and calls ``policy.admit(group, model, headers)``
once per request, and serves the request inside ``with grant.serving():`` (the grant is
:data:`CURRENT` meanwhile; its slot is given back at the end). A refusal is an
:class:`AccessDenied`, an :class:`~inferd.contracts.errors.InferdError` whose kind says why
(``RESTRICTED``, ``UNAUTHENTICATED``, ``FORBIDDEN``, ``LIMITED``): each frontend's error table turns
it into its status. The API group of each route and RPC is declared in its frontend's route table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from inferd.auth.admission import Hidden, ModelAction, admit, hidden
from inferd.auth.groups import ApiGroup, Restriction, RestrictionError, parse_restrictions
from inferd.auth.keys import AuthConfigError, KeyFile, Tenant, digest
from inferd.auth.limits import TenantLimits
from inferd.auth.policy import (
    CURRENT,
    GRPC_HEADER_PREFIX,
    HTTP_HEADER_PREFIX,
    OPEN,
    AccessDenied,
    AccessPolicy,
    Grant,
    unknown_model,
    visible_names,
)
from inferd.auth.usage import METERED, Usage, usage_json

__all__ = [
    "CURRENT",
    "METERED",
    "OPEN",
    "Usage",
    "usage_json",
    "AccessControl",
    "AccessDenied",
    "AccessPolicy",
    "ApiGroup",
    "AuthConfigError",
    "Grant",
    "Restriction",
    "RestrictionError",
    "Tenant",
    "access_from_flags",
    "Hidden",
    "ModelAction",
    "admit",
    "digest",
    "hidden",
    "unknown_model",
    "visible_entries",
    "visible_names",
]


class _HasName(Protocol):
    @property
    def name(self) -> str: ...


Named = TypeVar("Named", bound=_HasName)


class AccessControl:
    """The server's access rules: one :class:`AccessPolicy` per protocol, sharing the key file and
    the tenants' limits (a tenant's rate is one budget across HTTP, gRPC and plugins)."""

    def __init__(
        self, http: Mapping[ApiGroup, Restriction], grpc: Mapping[ApiGroup, Restriction], keys: KeyFile | None
    ) -> None:
        self.keys = keys
        self.limits = TenantLimits()
        #: Requests and tokens by tenant and model (``inferd.auth.usage``).
        self.usage = Usage(self.limits)
        self.http = AccessPolicy(http, keys, self.limits, HTTP_HEADER_PREFIX, "API")
        self.grpc = AccessPolicy(grpc, keys, self.limits, GRPC_HEADER_PREFIX, "protocol")
        self.model_names: Callable[[], Iterable[str]] = tuple

    def bind(self, model_names: Callable[[], Iterable[str]]) -> None:
        """Where the policies read the server's model names from, for "did you mean" hints."""
        self.model_names = self.http.model_names = self.grpc.model_names = model_names

    def tenant_limits(self) -> bool:
        """Whether the key file gives any tenant a rate, concurrency or token budget (each
        serving process counts those on its own)."""
        if self.keys is None:
            return False
        tenants = self.keys.current().tenants.values()
        return any(t.rate is not None or t.concurrency is not None or t.tokens_per_minute is not None for t in tenants)

    def policy(self, restricted: Mapping[ApiGroup, Restriction] | None = None, header_prefix: str = "") -> AccessPolicy:
        """A policy for a plugin's protocol: the same tenants and limits, its own restrictions."""
        policy = AccessPolicy(restricted or {}, self.keys, self.limits, header_prefix, "API")
        policy.model_names = self.model_names
        return policy

    def collect(self) -> Iterator[Metric]:
        """``inferd_tenant_requests_total{tenant,outcome}``, ``inferd_tenant_requests_in_flight`` and
        the metering families (:meth:`Usage.collect`)."""
        name = "inferd_tenant_requests_total"  # a family of that very name, as Triton names none
        total = Metric(name, "Requests by tenant and access outcome", "counter")
        for (tenant, outcome), count in sorted(self.limits.counts.items()):
            total.add_sample(name, {"tenant": tenant or "(none)", "outcome": outcome}, count)
        in_flight = GaugeMetricFamily(
            "inferd_tenant_requests_in_flight", "Requests in flight by tenant", labels=["tenant"]
        )
        for name, state in sorted(self.limits.states.items()):
            in_flight.add_metric([name], state.in_flight)
        yield total
        yield in_flight
        yield from self.usage.collect()


def visible_entries(entries: Sequence[Named]) -> list[Named]:
    """The entries (index rows, statistics: each with a ``name``) the current request's tenant may see."""
    grant = CURRENT.get()
    if grant is None or grant.tenant is None:
        return list(entries)
    return [e for e in entries if grant.sees(e.name)]


def access_from_flags(
    http_restricted: Sequence[str], grpc_restricted: Sequence[str], auth_config: str | None
) -> AccessControl | None:
    """The rules the flags ask for, or ``None`` when none does. Raises :class:`RestrictionError` or
    :class:`AuthConfigError` (naming the flag, or the file and line) for a bad value."""
    http = parse_restrictions(list(http_restricted), "--http-restricted-api")
    grpc = parse_restrictions(list(grpc_restricted), "--grpc-restricted-protocol", "protocol")
    keys = KeyFile(Path(auth_config)) if auth_config else None
    if not http and not grpc and keys is None:
        return None
    return AccessControl(http, grpc, keys)
