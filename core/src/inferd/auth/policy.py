"""The one access decision every frontend asks for, once per request:
:meth:`AccessPolicy.admit` ``(group, model, headers)`` -> a :class:`Grant`, or :class:`AccessDenied`.

Three checks, in order: Triton's restricted API groups (a header secret per group), the tenant of
the ``Authorization: Bearer <key>`` (``--auth-config``: its API groups and the models it may see),
and the tenant's limits. A model the tenant may not see answers as an unknown model does.
"""

from __future__ import annotations

import contextlib
import contextvars
import hmac
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from inferd.auth.groups import ApiGroup, Restriction
from inferd.auth.keys import KeyFile, Tenant, digest
from inferd.auth.limits import TenantLimits
from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument, NotFound, poll_failure
from inferd.contracts.hints import did_you_mean

#: Longest ``Authorization`` value looked at (a bearer key is far shorter).
MAX_AUTHORIZATION = 4096
_BEARER = "bearer "
#: How a frontend's transport names a restricted group's header: ``<prefix><key>``.
HTTP_HEADER_PREFIX = ""
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


class AccessDenied(InferdError):
    """A refused request. Its kind says why (:attr:`ErrorKind.RESTRICTED`, ``UNAUTHENTICATED``,
    ``FORBIDDEN``, ``LIMITED``); each frontend's table turns that into its status and headers."""

    def __init__(self, kind: ErrorKind, message: str, retry_after: int = 0, reason: str = "") -> None:
        super().__init__(message, kind)
        #: Seconds after which a request over a limit may be retried (0: not a limit's refusal).
        self.retry_after = retry_after
        #: A limit's outcome (``rate_limited``, ``token_limited``...), "" for other refusals.
        self.reason = reason


def unknown_model(model: str, group: ApiGroup = ApiGroup.INFERENCE, candidates: Iterable[str] = ()) -> InferdError:
    """What an unknown model answers to a request of ``group`` (the data plane's sentences): a
    model the tenant may not see answers it too. Triton's sentence comes first; a "did you mean"
    among ``candidates`` (only names the asker may see) follows after '; '."""
    hint = did_you_mean(model, candidates)
    tail = f"; {hint}" if hint else ""
    if group is ApiGroup.TRACE:
        return InvalidArgument(f"Request for unknown model : {model}{tail}")
    return NotFound(f"Request for unknown model: '{model}' is not found{tail}")


#: Most model names an error for a load of an unknown model lists.
MAX_LISTED = 10


def unknown_to_load(model: str, names: Iterable[str]) -> NotFound:
    """What loading a model in no repository answers: Triton's sentence first, then the closest of
    the repositories' ``names`` the asker may see, or the first of them (a bounded list)."""
    visible = sorted(set(visible_names(names)))
    hint = did_you_mean(model, visible)
    if hint:
        tail = hint
    elif visible:
        more = f" and {len(visible) - MAX_LISTED} more" if len(visible) > MAX_LISTED else ""
        tail = f"the repository has {', '.join(repr(n) for n in visible[:MAX_LISTED])}{more}"
    else:
        tail = "the repository has no models"
    return NotFound(f"{poll_failure(model)}; {tail}")


def visible_names(names: Iterable[str]) -> Iterator[str]:
    """``names`` the current request's tenant may see (all of them without a tenant)."""
    grant = CURRENT.get()
    if grant is None or grant.tenant is None:
        return iter(names)
    return (n for n in names if grant.sees(n))


@dataclass(frozen=True, slots=True)
class Grant:
    """An admitted request: its tenant (None without ``--auth-config``, or an open health probe),
    whether the model it names is visible to it, and the limit slot to give back."""

    tenant: Tenant | None = None
    visible: bool = True
    limits: TenantLimits | None = None

    def sees(self, model: str) -> bool:
        """Whether the tenant may see ``model`` (filters indexes and statistics)."""
        return self.tenant is None or self.tenant.sees(model)

    def release(self) -> None:
        """The request is answered: give back its in-flight slot (call once, in a ``finally``)."""
        if self.limits is not None and self.tenant is not None:
            self.limits.release(self.tenant)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """While the request is served: this is ``CURRENT`` (what model lookups filter by); at
        the end, its slot is given back."""
        token = CURRENT.set(self)
        try:
            yield
        finally:
            CURRENT.reset(token)
            self.release()


OPEN = Grant()
#: The grant of the request being served (set by the frontend around the call; None: no policy).
CURRENT: contextvars.ContextVar[Grant | None] = contextvars.ContextVar("inferd_grant", default=None)


class AccessPolicy:
    """The access rules of one frontend protocol (``http``, ``grpc``, or a plugin's own)."""

    def __init__(
        self,
        restricted: Mapping[ApiGroup, Restriction],
        keys: KeyFile | None,
        limits: TenantLimits,
        header_prefix: str,
        restricted_word: str = "API",
    ) -> None:
        self.restricted = dict(restricted)
        self.keys = keys
        self.limits = limits
        self.header_prefix = header_prefix
        self.restricted_word = restricted_word
        #: The server's model names (set by :meth:`AccessControl.bind`): an unknown-model answer
        #: suggests the closest one the tenant may see.
        self.model_names: Callable[[], Iterable[str]] = tuple

    def secret_headers(self) -> frozenset[str]:
        """The headers (lowercase) that carry credentials under these rules: the restricted groups'
        and, with API keys, ``authorization`` (never forwarded to models: ``inferd.frontends.header_forward``)."""
        names = {self.header_prefix + restriction.key for restriction in self.restricted.values()}
        if self.keys is not None:
            names.add("authorization")
        return frozenset(names)

    def admit(self, group: ApiGroup, model: str, headers: Mapping[str, str], slot: bool = True) -> Grant:
        """Admit one request to ``group`` naming ``model`` ("" for none); ``headers`` by lowercase
        name. Raises :class:`AccessDenied`, or the unknown-model error for a model the tenant may not
        see (but for health and model-repository requests: their grant says ``visible=False``).
        With ``slot=False`` the tenant's limits are left to :meth:`hold` (a stream: each of its
        requests takes a slot of its own)."""
        restriction = self.restricted.get(group)
        if restriction is not None:
            self._check_restricted(restriction, headers)
        if self.keys is None:
            return OPEN
        config = self.keys.current()
        if group is ApiGroup.HEALTH and not model and config.open_health:
            return OPEN
        tenant = self._tenant(headers, config.by_digest)
        if group not in tenant.apis:
            self.limits.count(tenant.name, "forbidden")
            raise AccessDenied(ErrorKind.FORBIDDEN, f"tenant '{tenant.name}' may not use the {group.value} API")
        visible = not model or tenant.sees(model)
        if not visible and group not in (ApiGroup.HEALTH, ApiGroup.MODEL_REPOSITORY):
            self.limits.count(tenant.name, "forbidden")
            raise unknown_model(model, group, (n for n in self.model_names() if tenant.sees(n)))
        if group is ApiGroup.HEALTH or not slot:
            return Grant(tenant, visible)
        return self.hold(Grant(tenant, visible))

    def hold(self, grant: Grant) -> Grant:
        """A slot and a token of ``grant``'s tenant for one request (release it with the grant
        returned); raises :class:`AccessDenied` (``LIMITED``) when the tenant is over a limit."""
        if grant.tenant is None:
            return grant
        limited = self.limits.acquire(grant.tenant)
        if limited is not None:
            raise AccessDenied(ErrorKind.LIMITED, limited.message, max(limited.retry_after, 1), limited.outcome)
        return Grant(grant.tenant, grant.visible, self.limits)

    def permits(self, group: ApiGroup, headers: Mapping[str, str]) -> bool:
        """Whether the request being served (admitted to another group) may also read ``group``'s
        answers: its restricted header and its tenant's API groups, asked without counting anything
        (a page that shows several groups' figures leaves out those it may not read)."""
        restriction = self.restricted.get(group)
        if restriction is not None and not self._has_secret(restriction, headers):
            return False
        grant = CURRENT.get()
        return grant is None or grant.tenant is None or group in grant.tenant.apis

    def _has_secret(self, restriction: Restriction, headers: Mapping[str, str]) -> bool:
        given = headers.get(self.header_prefix + restriction.key)
        return given is not None and hmac.compare_digest(given.encode(), restriction.value.encode())

    def _check_restricted(self, restriction: Restriction, headers: Mapping[str, str]) -> None:
        if not self._has_secret(restriction, headers):  # Triton's answer
            header, word = self.header_prefix + restriction.key, self.restricted_word
            raise AccessDenied(ErrorKind.RESTRICTED, f"This {word} is restricted, expecting header '{header}'")

    def _tenant(self, headers: Mapping[str, str], by_digest: Mapping[str, Tenant]) -> Tenant:
        value = headers.get("authorization")
        if value is None:
            self.limits.count("", "unauthenticated")
            raise _unauthenticated(
                "missing API key: send it as 'Authorization: Bearer <key>' (an HTTP header, "
                "or 'authorization' gRPC metadata)"
            )
        if len(value) > MAX_AUTHORIZATION:
            self.limits.count("", "unauthenticated")
            raise _unauthenticated(
                f"the Authorization header is {len(value)} bytes long, at most "
                f"{MAX_AUTHORIZATION}: send 'Authorization: Bearer <key>'"
            )
        if value[: len(_BEARER)].lower() != _BEARER or not value[len(_BEARER) :].strip():
            self.limits.count("", "unauthenticated")
            raise _unauthenticated("the Authorization header must be 'Bearer <key>'")
        tenant = by_digest.get(digest(value[len(_BEARER) :].strip()))
        if tenant is None:
            self.limits.count("", "unauthenticated")
            raise _unauthenticated("unknown API key")
        return tenant


def _unauthenticated(message: str) -> AccessDenied:
    return AccessDenied(ErrorKind.UNAUTHENTICATED, message)
