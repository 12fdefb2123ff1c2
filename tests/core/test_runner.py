"""Runner.run: one batch at a time per instance, recorded as Triton counts it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from inferd.contracts.backend import AsyncInstance, Instance, InstanceSpec, Started, SyncInstance
from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.engine.recorder import Recorder
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from tests.held_instances import Pipelined


def _request(rows: int, request_id: str) -> InferRequest:
    data = np.zeros((rows, 1), dtype=np.float32)
    return InferRequest("m", id=request_id, inputs={"IN": InferTensor.from_array("IN", data)})


class HalfFails(SyncInstance):
    """Answers requests whose id starts with "ok"; the others get a bad-input error."""

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        return [InferResponse("m", "1", r.id) if r.id.startswith("ok") else InvalidArgument("bad") for r in requests]


class Gate(SyncInstance):
    """Blocks each execute until the test opens the gate; remembers how many ran at once."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.running = 0
        self.most = 0

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.running += 1
        self.most = max(self.most, self.running)
        self.open.wait(5)
        self.running -= 1
        return [InferResponse("m", "1", r.id) for r in requests]


class Miscounts(SyncInstance):
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        return [InferResponse("m", "1", "")]


def _runner(instance: Instance) -> Runner:
    return Runner(instance, InstanceSpec("m_0", "KIND_CPU", 0, 0, "m"), Recorder(ModelStats("m", "1"), 8))


def test_one_execution_counts_every_row_and_infers_only_successful_ones() -> None:
    runner = _runner(HalfFails())
    try:
        outcomes = asyncio.run(runner.run([_request(2, "ok-a"), _request(3, "no-b"), _request(1, "ok-c")]))
    finally:
        runner.close()
    assert [o.id if isinstance(o, InferResponse) else o.message for o in outcomes] == ["ok-a", "bad", "ok-c"]
    stats = runner.recorder.stats.as_dict()
    assert (stats["execution_count"], stats["inference_count"]) == (1, 3)
    assert [b["batch_size"] for b in stats["batch_stats"]] == [6]
    infer = stats["inference_stats"]
    assert (infer["success"]["count"], infer["fail"]["count"], infer["compute_infer"]["count"]) == (2, 1, 2)
    assert runner.recorder.stats.failures == {"BACKEND": 1}


def test_batches_handed_to_a_busy_runner_wait_their_turn_and_are_not_yet_executing() -> None:
    gate = Gate()
    runner = _runner(gate)

    async def main() -> None:
        first = asyncio.ensure_future(runner.run([_request(1, "a")]))
        second = asyncio.ensure_future(runner.run([_request(1, "b"), _request(1, "c")]))
        await asyncio.sleep(0.2)
        assert runner.executing == 1  # "b" and "c" wait for the instance: they are pending
        gate.open.set()
        assert [o.id for o in await first + await second] == ["a", "b", "c"]  # type: ignore[union-attr]
        assert runner.executing == 0

    try:
        asyncio.run(main())
    finally:
        runner.close()
    assert gate.most == 1
    assert runner.recorder.stats.execution_count == 2


def test_the_wrong_number_of_responses_fails_the_batch_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    runner = _runner(Miscounts())
    try:
        with caplog.at_level(logging.ERROR, logger="inferd.engine.runner"):
            outcomes = asyncio.run(runner.run([_request(1, "a"), _request(1, "b")]))
    finally:
        runner.close()
    assert all(isinstance(o, InferdError) and o.kind is ErrorKind.INTERNAL for o in outcomes)
    messages = {o.message for o in outcomes if isinstance(o, InferdError)}
    assert messages == {"instance 'm_0' returned 1 responses for 2 requests"}
    assert [r.getMessage() for r in caplog.records] == [
        "model 'm' version 1 instance 'm_0': execute returned 1 responses for 2 requests"
    ]


class Timed(SyncInstance):
    """Answers after computing for the milliseconds its requests' ids say ("3": 3 ms of CPU,
    else none); records the thread each execute ran on."""

    def __init__(self, inline: bool) -> None:
        self.may_run_inline = inline
        self.threads: list[str] = []

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.threads.append(threading.current_thread().name)
        for r in requests:
            if r.id.isdigit():  # CPU, not a sleep: the runner learns from CPU time
                until = time.thread_time() + int(r.id) / 1000
                while time.thread_time() < until:
                    pass
        return [InferResponse("m", "1", r.id) for r in requests]


def _run_each(runner: Runner, batches: list[list[str]]) -> list[str]:
    """Run each batch (request ids) in turn on one loop; the ids answered, in order."""

    async def main() -> list[str]:
        answered = []
        for ids in batches:
            answered += [o.id for o in await runner.run([_request(1, i) for i in ids])]  # type: ignore[union-attr]
        return answered

    return asyncio.run(main())


def test_quick_executions_of_an_inline_capable_instance_run_on_the_loop() -> None:
    instance = Timed(inline=True)
    runner = _runner(instance)
    try:
        # the first runs on the instance thread (nothing is known of it yet), quick ones after it
        # on the loop; a 20 ms one (predicted quick: it runs inline once) sends the estimate over
        # the limit, so the next go to the thread until quick ones bring it down again
        batches = [["a"], ["b", "c"], ["d"], ["20"]] + [[f"q{i}"] for i in range(60)]
        assert _run_each(runner, batches) == [i for b in batches for i in b]
    finally:
        runner.close()
    loop_thread = threading.current_thread().name
    on_loop = [t == loop_thread for t in instance.threads]
    assert on_loop[:4] == [False, True, True, True]
    assert on_loop[4] is False  # right after the slow one
    assert on_loop[-1] is True  # quick again once its estimate has decayed
    assert runner.recorder.stats.execution_count == len(batches)
    assert runner.recorder.stats.as_dict()["inference_count"] == 65


def test_a_batch_is_predicted_from_its_size() -> None:
    instance = Timed(inline=True)
    runner = _runner(instance)
    try:
        # quick batches of one run inline; 5,000 requests are predicted to take 5,000 times as long
        _run_each(runner, [["a"], ["b"], ["c"], ["z"] * 5000])
    finally:
        runner.close()
    loop_thread = threading.current_thread().name
    assert [t == loop_thread for t in instance.threads] == [False, True, True, False]


def test_an_instance_that_may_not_run_inline_always_runs_on_its_thread() -> None:
    instance = Timed(inline=False)
    runner = _runner(instance)
    try:
        _run_each(runner, [["a"], ["b"], ["c"], ["d"]])
    finally:
        runner.close()
    assert instance.threads == ["inferd-m_0"] * 4


def test_an_instance_that_turns_inline_off_while_it_runs_stays_on_its_thread() -> None:
    instance = Timed(inline=True)
    runner = _runner(instance)
    try:
        _run_each(runner, [["a"], ["b"]])
        instance.may_run_inline = False  # as an in-process Python model does once an execution waited
        _run_each(runner, [["c"], ["d"]])
    finally:
        runner.close()
    loop_thread = threading.current_thread().name
    assert instance.threads == ["inferd-m_0", loop_thread, "inferd-m_0", "inferd-m_0"]


def test_a_batch_with_more_input_bytes_than_the_instance_allows_inline_runs_on_its_thread() -> None:
    instance = Timed(inline=True)
    instance.inline_max_bytes = 8  # two FP32 elements; a request of one row holds one
    runner = _runner(instance)

    async def main() -> None:
        for request in ([_request(1, "a")], [_request(1, "b")], [_request(3, "big")], [_request(1, "c")]):
            await runner.run(request)

    try:
        asyncio.run(main())
    finally:
        runner.close()
    loop_thread = threading.current_thread().name
    assert instance.threads == ["inferd-m_0", loop_thread, "inferd-m_0", loop_thread]


class Held(Pipelined):
    """A non-blocking instance answering each batch when the test says (one batch at a time)."""

    pipeline_depth = 1


def test_a_batch_cancelled_while_waiting_for_its_turn_takes_none_and_loses_none() -> None:
    async def main() -> None:
        instance = Held()
        runner = _runner(instance)

        async def settle() -> None:
            for _ in range(5):
                await asyncio.sleep(0)

        calls = [asyncio.ensure_future(runner.run([_request(1, str(i))])) for i in range(3)]
        await settle()
        assert len(instance.held) == 1  # the others wait for the instance's one turn, in order
        calls[1].cancel()
        await settle()
        instance.answer()
        await settle()
        assert [requests[0].id for requests, _ in instance.held] == ["2"]  # the cancelled one was skipped
        instance.answer()
        assert calls[1].cancelled()
        assert [(await c)[0].id for c in (calls[0], calls[2])] == ["0", "2"]
        last = asyncio.ensure_future(runner.run([_request(1, "3")]))
        await settle()
        instance.answer()  # the turn came back: the next batch ran
        assert (await asyncio.wait_for(last, 2))[0].id == "3"
        assert runner.executing == 0
        runner.close()

    asyncio.run(main())


def test_a_pipelined_batch_that_waited_behind_another_counts_the_wait_as_queue_time() -> None:
    """Both batches are handed over at once; the second says (Started) it could only start when the first
    ended: that wait is queue time, not compute_infer. A start past the execution's end is bounded by it."""

    async def main() -> None:
        instance = Pipelined()
        runner = _runner(instance)
        began = time.monotonic_ns()
        calls = [asyncio.ensure_future(runner.run([_request(1, str(i))])) for i in range(2)]
        for _ in range(5):
            await asyncio.sleep(0)
        handed = time.monotonic_ns()
        assert len(instance.held) == 2
        await asyncio.sleep(0.05)
        instance.answer()
        first_end = time.monotonic_ns()
        await asyncio.sleep(0.05)
        requests, future = instance.held.pop(0)
        future.set_result(Started([InferResponse("m", "1", r.id) for r in requests], first_end))
        await asyncio.gather(*calls)
        stats = runner.recorder.stats.as_dict()["inference_stats"]
        assert stats["queue"]["ns"] >= first_end - handed  # without Started: ~0
        # Without Started: + the second's 50 ms wait. The first batch's end is stamped when the runner
        # resumes, after first_end: on a loaded machine the two spans overlap by that delay (< 25 ms).
        assert stats["compute_infer"]["ns"] <= time.monotonic_ns() - began + 25_000_000
        late = asyncio.ensure_future(runner.run([_request(1, "late")]))
        for _ in range(5):
            await asyncio.sleep(0)
        requests, future = instance.held.pop(0)
        future.set_result(Started([InferResponse("m", "1", r.id) for r in requests], time.monotonic_ns() + 10**12))
        await late
        after = runner.recorder.stats.as_dict()["inference_stats"]
        assert after["compute_infer"]["ns"] >= stats["compute_infer"]["ns"]  # bounded: no negative compute
        assert after["queue"]["ns"] - stats["queue"]["ns"] < 10**10
        runner.close()

    asyncio.run(main())


class Awaits(AsyncInstance):
    """Awaits a future per batch that the test resolves; records each execution's outcome and task."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[None]] = []
        self.ended: list[str] = []
        self.tasks: list[asyncio.Task[object] | None] = []

    async def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.tasks.append(asyncio.current_task())
        if requests[0].id == "now":  # answers before any wait
            return [InferResponse("m", "1", r.id) for r in requests]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        try:
            await future
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        if requests[0].id == "bad":
            raise InvalidArgument("bad input")
        if requests[0].id == "broken":
            raise ValueError("broken")
        self.ended.append("finished")
        return [InferResponse("m", "1", r.id) for r in requests]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_an_async_instance_runs_in_its_callers_task_until_it_waits() -> None:
    async def main() -> None:
        instance = Awaits()
        runner = _runner(instance)
        call = asyncio.ensure_future(runner.run([_request(1, "now")]))
        assert [o.id for o in await call] == ["now"]  # type: ignore[union-attr]
        assert instance.tasks == [call]  # no task of its own
        runner.close()

    asyncio.run(main())


def test_a_caller_that_leaves_does_not_cancel_an_async_execution() -> None:
    async def main() -> None:
        instance = Awaits()
        runner = _runner(instance)
        first = asyncio.ensure_future(runner.run([_request(1, "a")]))
        await _settle()
        first.cancel()
        await _settle()
        assert first.cancelled()  # the caller left at once ...
        assert runner.executing == 1 and instance.ended == []  # ... the execution runs on, the instance busy
        second = asyncio.ensure_future(runner.run([_request(1, "b")]))
        await _settle()
        assert len(instance.futures) == 1  # b waits for the instance's one turn
        instance.futures[0].set_result(None)
        await _settle()
        assert instance.ended == ["finished"]  # the abandoned execution ended normally, then b ran
        instance.futures[1].set_result(None)
        assert [o.id for o in await asyncio.wait_for(second, 2)] == ["b"]  # type: ignore[union-attr]
        assert runner.executing == 0
        assert runner.recorder.stats.execution_count == 1  # the abandoned batch had no caller to record it
        runner.close()

    asyncio.run(main())


def test_an_async_instances_errors_become_each_requests_error(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> list[list[object]]:
        instance = Awaits()
        runner = _runner(instance)
        out = []
        for name in ("bad", "broken"):
            call = asyncio.ensure_future(runner.run([_request(1, name), _request(1, "x")]))
            await _settle()
            instance.futures[-1].set_result(None)
            out.append(await call)
        cancelled = asyncio.ensure_future(runner.run([_request(1, "c")]))
        await _settle()
        instance.futures[-1].cancel()  # the instance's own wait is cancelled
        out.append(await cancelled)
        runner.close()
        return out

    with caplog.at_level(logging.ERROR, logger="inferd.engine.runner"):
        bad, broken, cancelled = asyncio.run(main())
    assert [(o.kind, o.message) for o in bad] == [(ErrorKind.INVALID_ARG, "bad input")] * 2  # type: ignore[attr-defined]
    assert [o.message for o in broken] == ["instance 'm_0' failed: ValueError: broken"] * 2  # type: ignore[attr-defined]
    assert [o.message for o in cancelled] == ["instance 'm_0' cancelled its execution"]  # type: ignore[attr-defined]
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None  # the unexpected one, with its traceback


class NotAsync(AsyncInstance):
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:  # type: ignore[override]
        return []


def test_an_instance_of_neither_type_or_a_plain_async_execute_is_refused_by_name() -> None:
    with pytest.raises(
        TypeError, match="instance 'm_0' is a object, which is neither a SyncInstance nor an AsyncInstance"
    ):
        _runner(object())  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"instance 'm_0' \(NotAsync\) is an AsyncInstance whose execute is not an 'async def'"
    ):
        _runner(NotAsync())
