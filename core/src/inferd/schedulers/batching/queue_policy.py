"""The dynamic batcher's queue: priority levels, each with Triton's ``ModelQueuePolicy``.

Requests wait in one :class:`PriorityQueue` shared by every instance of a model version. Level 1
is served first. Within a level, requests keep arrival order; requests whose timeout expired
under ``timeout_action: DELAY`` move behind the level's unexpired requests, and under ``REJECT``
leave the queue with Triton's "Request timeout expired" error.

With ``--auth-config``, a tenant's ``priority`` and ``queue_timeout_ms`` apply (docs/traffic.md,
"Tenant priorities"): its requests enter at its level, clamped into the model's
``priority_levels``; a request's own ``priority`` may only lower it. A model that defines no
levels gets levels as its tenants need them (up to :data:`IMPLICIT_LEVELS`), all with its default
queue policy; requests of tenants without a priority stay at level 1, as every request does today.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.auth.policy import CURRENT
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.scheduler import Rejected

if TYPE_CHECKING:
    from inferd.auth.keys import Tenant
    from inferd.config import ModelConfig
    from inferd.contracts.types import InferRequest

_DELAY = 1  # ModelQueuePolicy.TimeoutAction.DELAY

#: Triton's message for a request rejected after waiting past its timeout (UNAVAILABLE, HTTP 503).
TIMEOUT_MESSAGE = "Request timeout expired"
#: Levels a model without ``priority_levels`` gets for its tenants' priorities (lower ones share the last).
IMPLICIT_LEVELS = 16


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """One level's ``ModelQueuePolicy``."""

    delay_on_timeout: bool = False
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_proto(cls, policy: Any) -> QueuePolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == _DELAY,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_us(self, requested_us: int, tenant_us: int = 0) -> int:
        """The timeout a request gets; 0 means none.

        As in Triton, a request's own timeout only applies when the policy allows overrides and
        it is shorter than the policy's default (so with no default it is ignored). A tenant's
        ``queue_timeout_ms`` is its requests' default when the policy has none or a longer one.
        """
        timeout = self.default_timeout_us
        if tenant_us and (not timeout or tenant_us < timeout):
            timeout = tenant_us
        if self.allow_timeout_override and 0 < requested_us < timeout:
            timeout = requested_us
        return timeout


@dataclass(eq=False, slots=True)
class Pending:
    """A queued request and the future its caller awaits."""

    request: InferRequest
    future: asyncio.Future[Any]
    rows: int
    shape_key: tuple[Any, ...]
    enqueue_ns: int
    level: int = 0
    timer: asyncio.TimerHandle | None = None
    queued: bool = True
    #: Set once answered (``preserve_ordering`` holds answers until earlier requests are answered).
    outcome: Any = None
    answered: bool = False


@dataclass(slots=True)
class _Level:
    policy: QueuePolicy
    queue: deque[Pending] = field(default_factory=deque)
    delayed: deque[Pending] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


def uint_parameter(request: InferRequest, key: str, model: str) -> int:
    """A request parameter that must be an unsigned integer (``priority``, ``timeout``); 0 if absent."""
    value = request.parameters.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"request parameter '{key}' for model '{model}' must be an unsigned integer, got {value!r}"
        )
    return value


class PriorityQueue:
    """Priority levels in serving order; ``expired`` is called for requests rejected on timeout."""

    def __init__(self, config: ModelConfig, expired: Callable[[Pending], None]) -> None:
        batching = config.dynamic_batching
        default = QueuePolicy.from_proto(batching.default_queue_policy)
        self.model = config.name
        self.level_count = int(batching.priority_levels)
        self.default_level = int(batching.default_priority_level) if self.level_count else 1
        overrides = {int(k): QueuePolicy.from_proto(v) for k, v in batching.priority_queue_policy.items()}
        count = max(1, self.level_count)
        self.levels = [_Level(overrides.get(i, default)) for i in range(1, count + 1)]
        self._default_policy = default
        self._expired = expired
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Pending]:
        """Requests in serving order: by level, unexpired before delayed within a level."""
        for level in self.levels:
            yield from level.queue
            yield from level.delayed

    def level_of(self, request: InferRequest, tenant: Tenant | None = None) -> int:
        """The 0-based level index; priority 0 or one past ``priority_levels`` takes the default.
        A ``tenant`` with a priority sets the level (clamped into the model's levels); the
        request's own ``priority`` may only lower it."""
        ceiling = tenant.priority if tenant is not None else None
        if ceiling is None:
            if self.level_count <= 1:
                return 0
            priority = uint_parameter(request, "priority", self.model)
            if priority == 0 or priority > self.level_count:
                priority = self.default_level
            return priority - 1
        priority = max(ceiling, uint_parameter(request, "priority", self.model))
        if self.level_count:
            return min(priority, self.level_count) - 1
        index = min(priority, IMPLICIT_LEVELS) - 1
        while len(self.levels) <= index:  # a model without levels: one per tenant level met
            self.levels.append(_Level(self._default_policy))
        return index

    def push(self, item: Pending) -> None:
        """Queue ``item``; raises :class:`~inferd.contracts.scheduler.Rejected` when its level is full."""
        request = item.request
        grant = CURRENT.get()
        tenant = grant.tenant if grant is not None else None
        index = self.level_of(request, tenant)
        level = self.levels[index]
        policy = level.policy
        if policy.max_queue_size and len(level) >= policy.max_queue_size:
            raise Rejected(f"[request id: {request.id or '<id_unknown>'}] Exceeds maximum queue size")
        requested = uint_parameter(request, "timeout", self.model) if policy.allow_timeout_override else 0
        timeout_us = policy.timeout_us(requested, tenant.queue_timeout_us if tenant is not None else 0)
        item.level = index
        level.queue.append(item)
        self._size += 1
        if timeout_us:
            loop = asyncio.get_running_loop()
            item.timer = loop.call_later(timeout_us / 1e6, self._on_timeout, item)

    def _on_timeout(self, item: Pending) -> None:
        item.timer = None
        if not item.queued:
            return
        level = self.levels[item.level]
        level.queue.remove(item)
        if level.policy.delay_on_timeout:
            level.delayed.append(item)
            return
        item.queued = False
        self._size -= 1
        self._expired(item)

    def take(self, count: int) -> list[Pending]:
        """Remove and return the first ``count`` requests in serving order."""
        out: list[Pending] = []
        for level in self.levels:
            for dq in (level.queue, level.delayed):
                while dq and len(out) < count:
                    out.append(self._detach(dq.popleft()))
            if len(out) == count:
                break
        return out

    def discard(self, item: Pending) -> None:
        """Drop a request whose caller went away (no-op when it already left the queue)."""
        if not item.queued:
            return
        level = self.levels[item.level]
        (level.queue if item in level.queue else level.delayed).remove(item)
        self._detach(item)

    def _detach(self, item: Pending) -> Pending:
        item.queued = False
        self._size -= 1
        if item.timer is not None:
            item.timer.cancel()
            item.timer = None
        return item

    def drain(self) -> list[Pending]:
        """Remove everything (used when the scheduler stops with requests still queued)."""
        return self.take(self._size)
