"""Triton's rate limiter (``--rate-limit=execution_count``): instances run when their resources are free.

Each instance group may say, in ``instance_group.rate_limiter``, which named resources an
instance holds while it executes (``resources { name count global }``) and its ``priority``.
Resources are shared by every model of the server: per device (the instance's device) unless a
model marks the resource ``global``. A resource has as many units as ``--rate-limit-resource
<name>:<count>[:<device>]`` gives it, or else the most any loaded instance asks for (so every
instance can run). An execution waits until all its resources are free, holds them while it
runs, and gives them back when it ends.

Among waiting instances, the one with the smallest ``priority x (executions + 1)`` goes next
(priority 0 counts as 1): an instance of priority 2 gets half the turns of one of priority 1.
The first in that order runs as soon as its resources are free; the others wait behind it, as in
Triton. Instances that name no resources never wait. With ``--rate-limit=off`` (the default)
there is no limiter at all: runners hold no :class:`Gate` and do nothing per request.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferd.config.model_config_pb2 import ModelRateLimiter
from inferd.contracts.errors import InvalidArgument

#: A pool of one resource: ``(name, device)``, device ``None`` for a global resource.
Key = tuple[str, "int | None"]

#: ``--rate-limit-resource`` device for "every device, and the global pool".
ALL_DEVICES = -1


def parse_resource(value: str) -> tuple[str, int, int]:
    """``<name>:<count>[:<device>]`` -> ``(name, count, device)``, device :data:`ALL_DEVICES` when absent."""
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not all(p.strip().isdigit() for p in parts[1:]):
        raise ValueError(
            f"--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            f"'<resource_name>:<count>'. Got {value}"
        )
    device = int(parts[2]) if len(parts) == 3 else ALL_DEVICES
    return parts[0], int(parts[1]), device


@dataclass(eq=False)
class Gate:
    """One instance's place in the limiter: what it holds while it executes, and how often it ran."""

    limiter: RateLimiter
    owner: str
    needs: tuple[tuple[Key, int], ...]
    weight: int
    executions: int = 0
    #: Keys whose global / per-device nature this gate fixed (checked across models).
    kinds: Mapping[str, bool] = field(default_factory=dict)

    async def acquire(self) -> None:
        """Wait until this instance's resources are free, and take them."""
        await self.limiter.acquire(self)

    def release(self) -> None:
        """Give the resources back (the execution ended) and start whoever may run now."""
        self.limiter.release(self)

    def close(self) -> None:
        """The instance is gone: its needs no longer size the default pools."""
        self.limiter.unregister(self)


class RateLimiter:
    """The server's resource pools and the instances waiting for them (one per process)."""

    def __init__(self, resources: Sequence[tuple[str, int, int]] = ()) -> None:
        #: ``--rate-limit-resource`` counts: (name, device) -> units; device ALL_DEVICES for any.
        self.explicit: dict[tuple[str, int], int] = {(n, d): c for n, c, d in resources}
        self._gates: list[Gate] = []
        self._in_use: dict[Key, int] = {}
        self._sizes: dict[Key, int] = {}
        self._waiting: list[tuple[int, int, Gate, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()  # gates register from load threads

    def gate(self, owner: str, device: int, config: ModelRateLimiter) -> Gate | None:
        """Register an instance (``owner`` names it in errors); ``None`` when it needs nothing."""
        needs: list[tuple[Key, int]] = []
        kinds: dict[str, bool] = {}
        for resource in config.resources:
            if resource.count == 0:
                continue
            is_global = bool(getattr(resource, "global"))  # a Python keyword: no attribute syntax
            key: Key = (resource.name, None if is_global else device)
            needs.append((key, resource.count))
            kinds[resource.name] = is_global
        if not needs:
            return None
        gate = Gate(self, owner, tuple(needs), max(1, config.priority), kinds=kinds)
        with self._lock:
            self._check(gate)
            self._gates.append(gate)
            self._resize()
        return gate

    def _check(self, gate: Gate) -> None:
        for other in self._gates:
            for name, is_global in gate.kinds.items():
                if other.kinds.get(name, is_global) != is_global:
                    raise InvalidArgument(
                        f'Resource "{name}" is present as both global and device-specific resource in the model '
                        f"configuration ({gate.owner} and {other.owner} use it differently)"
                    )
        for key, count in gate.needs:
            limit = self._explicit_size(key)
            if limit is not None and count > limit:
                where = "global resource" if key[1] is None else f"resource on device {key[1]}"
                raise InvalidArgument(  # Triton's sentence, then which instance and what to change
                    f'Resource count for "{key[0]}" is limited to {limit} which will prevent scheduling of one or '
                    f"more model instances, the minimum required count is {count} ({gate.owner} needs {count} of "
                    f"{where} '{key[0]}'; raise --rate-limit-resource={key[0]}:<count>)"
                )

    def _explicit_size(self, key: Key) -> int | None:
        """The ``--rate-limit-resource`` count of a pool; a global pool ignores the device given."""
        name, device = key
        if device is not None and (name, device) in self.explicit:
            return self.explicit[(name, device)]
        if device is None and (name, ALL_DEVICES) not in self.explicit:
            return next((c for (n, _), c in self.explicit.items() if n == name), None)
        return self.explicit.get((name, ALL_DEVICES))

    def _resize(self) -> None:
        sizes: dict[Key, int] = {}
        for gate in self._gates:
            for key, count in gate.needs:
                sizes[key] = max(sizes.get(key, 0), count)
        for key in sizes:
            explicit = self._explicit_size(key)
            if explicit is not None:
                sizes[key] = explicit
        self._sizes = sizes

    def unregister(self, gate: Gate) -> None:
        with self._lock:
            if gate in self._gates:
                self._gates.remove(gate)
                self._resize()

    def units(self, name: str, device: int | None = None) -> int:
        """How many units the pool of ``name`` has (``device`` None: the global pool); 0 if unknown."""
        return self._sizes.get((name, device), 0)

    def _fits(self, gate: Gate) -> bool:
        sizes, in_use = self._sizes, self._in_use
        return all(in_use.get(key, 0) + count <= sizes.get(key, 0) for key, count in gate.needs)

    def _take(self, gate: Gate) -> None:
        for key, count in gate.needs:
            self._in_use[key] = self._in_use.get(key, 0) + count
        gate.executions += 1

    async def acquire(self, gate: Gate) -> None:
        """Take ``gate``'s resources, waiting in priority order while they are in use."""
        with self._lock:
            if not self._waiting and self._fits(gate):
                self._take(gate)
                return
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (gate.weight * (gate.executions + 1), next(self._order), gate, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(gate)  # granted just as the caller was cancelled
            else:
                future.cancel()
                self._grant()
            raise

    def release(self, gate: Gate) -> None:
        """Give ``gate``'s resources back and start the waiting instances that now fit."""
        with self._lock:
            for key, count in gate.needs:
                self._in_use[key] -= count
        self._grant()

    def _grant(self) -> None:
        with self._lock:
            waiting = self._waiting
            while waiting:
                _, _, gate, future = waiting[0]
                if future.done():  # its caller gave up
                    heapq.heappop(waiting)
                    continue
                if not self._fits(gate):
                    return  # the first in line waits for its resources; the rest wait behind it
                heapq.heappop(waiting)
                self._take(gate)
                future.set_result(None)
