"""InstancePool: free instances go to the oldest waiter, and a cancelled waiter loses none.

The pool holds real runners (each with its thread); the tests only acquire and release them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest

from inferd.contracts.backend import InstanceSpec, SyncInstance
from inferd.contracts.errors import InferdError
from inferd.contracts.types import InferRequest, InferResponse
from inferd.engine.pool import InstancePool
from inferd.engine.recorder import Recorder
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from tests.held_instances import Pipelined


class Nothing(SyncInstance):
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        return [InferResponse("m", "1", r.id) for r in requests]


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    recorder = Recorder(ModelStats("m", "1"), 0)
    made = [Runner(Nothing(), InstanceSpec(f"m_{i}", "KIND_CPU", 0, i, "m"), recorder) for i in range(2)]
    yield made
    for runner in made:
        runner.close()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_free_instances_are_taken_in_order_then_callers_wait(runners: list[Runner]) -> None:
    async def main() -> None:
        pool = InstancePool(runners)
        assert [await pool.acquire(), await pool.acquire()] == runners
        waiter = asyncio.ensure_future(pool.acquire())
        await _settle()
        assert not waiter.done()
        pool.release(runners[1])
        assert await waiter is runners[1]

    asyncio.run(main())


def test_a_released_instance_goes_to_the_oldest_waiter_not_a_newcomer(runners: list[Runner]) -> None:
    async def main() -> None:
        pool = InstancePool(runners[:1])
        held = await pool.acquire()
        first = asyncio.ensure_future(pool.acquire())
        await _settle()
        second = asyncio.ensure_future(pool.acquire())
        await _settle()
        pool.release(held)
        newcomer = asyncio.ensure_future(pool.acquire())  # arrives after the release: must queue
        await _settle()
        assert first.done() and not second.done() and not newcomer.done()
        pool.release(await first)
        await _settle()
        assert second.done() and not newcomer.done()
        pool.release(await second)
        assert await newcomer is held

    asyncio.run(main())


def test_a_waiter_cancelled_while_waiting_leaves_the_queue(runners: list[Runner]) -> None:
    async def main() -> None:
        pool = InstancePool(runners[:1])
        held = await pool.acquire()
        cancelled = asyncio.ensure_future(pool.acquire())
        behind = asyncio.ensure_future(pool.acquire())
        await _settle()
        cancelled.cancel()
        await _settle()
        assert cancelled.cancelled()
        pool.release(held)
        assert await asyncio.wait_for(behind, 2) is held  # the cancelled waiter did not swallow the instance

    asyncio.run(main())


def test_a_release_between_a_waiter_s_cancel_and_its_wake_up_drops_it_once(runners: list[Runner]) -> None:
    """The cancelled waiter's future is dropped by ``release()`` before its task runs; the task's
    own clean-up must not try to remove it again (it raised ``ValueError: ... not in deque``)."""

    async def main() -> None:
        pool = InstancePool(runners[:1])
        held = await pool.acquire()
        cancelled = asyncio.ensure_future(pool.acquire())
        behind = asyncio.ensure_future(pool.acquire())
        await _settle()
        cancelled.cancel()  # cancels its future now; the task wakes on a later loop turn...
        pool.release(held)  # ...after this release has popped that future and served `behind`
        await _settle()
        assert cancelled.cancelled()  # not ValueError
        assert await asyncio.wait_for(behind, 2) is held
        alone = asyncio.ensure_future(pool.acquire())  # the same with nobody behind: freed, not lost
        await _settle()
        alone.cancel()
        pool.release(held)
        await _settle()
        assert alone.cancelled()
        assert await asyncio.wait_for(pool.acquire(), 2) is held

    asyncio.run(main())


def test_a_waiter_cancelled_just_after_the_hand_off_gives_the_instance_back(runners: list[Runner]) -> None:
    async def main() -> None:
        pool = InstancePool(runners[:1])
        held = await pool.acquire()
        unlucky = asyncio.ensure_future(pool.acquire())
        behind = asyncio.ensure_future(pool.acquire())
        await _settle()
        pool.release(held)  # resolves unlucky's future...
        unlucky.cancel()  # ...and it is cancelled before it could run
        await _settle()
        assert unlucky.cancelled()
        assert await asyncio.wait_for(behind, 2) is held
        pool.release(held)
        assert await pool.acquire() is held  # nothing lost: the one instance is free again

    asyncio.run(main())


def test_run_executes_on_a_free_instance_and_frees_it(runners: list[Runner]) -> None:
    async def main() -> None:
        pool = InstancePool(runners[:1])
        (response,) = await pool.run([InferRequest("m", id="a")])
        assert isinstance(response, InferResponse) and response.id == "a"
        assert await pool.acquire() is runners[0]

    asyncio.run(main())


def test_an_instance_with_a_pipeline_depth_gets_that_many_batches_at_once() -> None:
    async def main() -> None:
        instance = Pipelined()
        runner = Runner(instance, InstanceSpec("m_0", "KIND_CPU", 0, 0, "m"), Recorder(ModelStats("m", "1"), 0))
        pool = InstancePool([runner])
        calls = [asyncio.ensure_future(pool.run([InferRequest("m", id=str(i))])) for i in range(3)]
        await _settle()
        assert len(instance.held) == 2  # the second batch is handed over while the first executes
        assert runner.executing == 2
        instance.answer()
        await _settle()
        assert calls[0].done() and len(instance.held) == 2  # the third takes the freed turn
        instance.answer()
        instance.answer()
        assert [(await c)[0].id for c in calls] == ["0", "1", "2"]
        runner.close()

    asyncio.run(main())
