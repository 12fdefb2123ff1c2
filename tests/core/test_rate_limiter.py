"""The rate limiter's pools and order, without a server (end to end: tests/e2e/test_rate_limiter.py)."""

from __future__ import annotations

import asyncio

import pytest

from inferd.config.model_config_pb2 import ModelRateLimiter
from inferd.contracts.errors import InvalidArgument
from inferd.engine.rate_limiter import ALL_DEVICES, RateLimiter, parse_resource


def _limits(*resources: tuple[str, int, bool], priority: int = 0) -> ModelRateLimiter:
    limiter = ModelRateLimiter(priority=priority)
    for name, count, is_global in resources:
        resource = limiter.resources.add(name=name, count=count)
        setattr(resource, "global", is_global)
    return limiter


def test_resource_flags_parse_with_and_without_a_device():
    assert parse_resource("R1:10") == ("R1", 10, ALL_DEVICES)
    assert parse_resource("R2:5:1") == ("R2", 5, 1)
    for bad in ("R1", "R1:x", ":3", "R1:1:2:3"):
        with pytest.raises(ValueError, match="--rate-limit-resource option format"):
            parse_resource(bad)


def test_pools_default_to_the_largest_need_and_flags_set_them_per_device():
    # Triton's documented example: R1:10 everywhere, R2 5 on device 0 and 8 on device 1, R3 global.
    limiter = RateLimiter([("R1", 10, ALL_DEVICES), ("R2", 5, 0), ("R2", 8, 1), ("R3", 2, ALL_DEVICES)])
    for device in (0, 1):
        limiter.gate(
            f"i{device}", device, _limits(("R1", 4, False), ("R2", 4, False), ("R3", 1, True), ("R4", 3, False))
        )
    limiter.gate("j", 0, _limits(("R4", 7, False)))
    assert [limiter.units("R1", d) for d in (0, 1)] == [10, 10]
    assert [limiter.units("R2", d) for d in (0, 1)] == [5, 8]
    assert limiter.units("R3") == 2 and limiter.units("R3", 0) == 0  # one global pool
    assert [limiter.units("R4", d) for d in (0, 1)] == [7, 3]  # the most an instance on that device needs


def test_a_resource_both_global_and_per_device_is_refused():
    limiter = RateLimiter()
    limiter.gate("model 'a' instance 'a_0'", 0, _limits(("R", 1, True)))
    with pytest.raises(InvalidArgument, match='Resource "R" is present as both global and device-specific'):
        limiter.gate("model 'b' instance 'b_0'", 0, _limits(("R", 1, False)))


def test_an_instance_without_resources_gets_no_gate_and_a_closed_gate_stops_sizing_pools():
    limiter = RateLimiter()
    assert limiter.gate("free", 0, _limits()) is None
    big = limiter.gate("big", 0, _limits(("R", 4, False)))
    limiter.gate("small", 0, _limits(("R", 1, False)))
    assert limiter.units("R", 0) == 4 and big is not None
    big.close()
    assert limiter.units("R", 0) == 1


def test_waiters_go_in_priority_order_and_one_that_gives_up_is_skipped():
    async def scenario() -> list[str]:
        limiter = RateLimiter()
        gates = {n: limiter.gate(n, 0, _limits(("R", 1, False), priority=p))
                 for n, p in (("holder", 1), ("lo", 3), ("gone", 1), ("hi", 1))}  # fmt: skip
        order: list[str] = []

        async def run(name: str) -> None:
            gate = gates[name]
            assert gate is not None
            await gate.acquire()
            order.append(name)
            gate.release()

        holder = gates["holder"]
        assert holder is not None
        await holder.acquire()
        tasks = {n: asyncio.ensure_future(run(n)) for n in ("lo", "gone", "hi")}
        await asyncio.sleep(0)
        tasks["gone"].cancel()
        await asyncio.sleep(0)
        holder.release()
        await asyncio.gather(tasks["lo"], tasks["hi"])
        assert limiter._in_use == {("R", 0): 0}
        return order

    assert asyncio.run(scenario()) == ["hi", "lo"]
