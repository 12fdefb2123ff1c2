"""Asynchronous instances (``AsyncInstance``): ``async def execute`` runs on the server's loop.

A real in-process server and a decoupled "ticker" backend defined here, in two flavours: one
that hands each request to a task on the loop (how an asyncio engine such as vLLM's is driven)
and its blocking twin, which sends the same responses from its instance thread. The requests go
through the data plane, as every frontend's do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

from inferd.contracts.backend import (
    AsyncInstance,
    Backend,
    Instance,
    InstanceSpec,
    Model,
    ModelLoadContext,
    SyncInstance,
)
from inferd.contracts.errors import Cancelled, InferdError, InvalidArgument
from inferd.contracts.hookspecs import BackendRegister, hookimpl
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.testing import InProcessServer, write_repository

CONFIG = """
name: "%s"
backend: "ticker"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MODELS = ("on_loop", "threaded", "mixed")
#: A non-decoupled model whose non-blocking instance answers with a future, set a little later.
DEFERRED_CONFIG = CONFIG.replace("model_transaction_policy { decoupled: true }", "")


def _count(request: InferRequest) -> int:
    return int(request.inputs["COUNT"].data.reshape(-1)[0])


def _response(request: InferRequest, index: int) -> InferResponse:
    tensor = InferTensor.from_array("INDEX", np.array([index], dtype=np.int32))
    return InferResponse(request.model_name, "1", request.id, [tensor])


class LoopTicker(AsyncInstance):
    """Sends COUNT responses from a task on the server's loop (a negative COUNT: an error, sent
    from ``execute``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: (thread name, whether the running loop was the context's) of each execute.
        self.calls: list[tuple[str, bool]] = []
        #: The response index at which a cancelled request stopped.
        self.stopped_at: list[int] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.calls.append((threading.current_thread().name, asyncio.get_running_loop() is self.loop))
        for request in requests:
            if _count(request) < 0:  # a bad input is answered here, as vLLM's backend does
                assert request.response_sender is not None
                request.response_sender(InvalidArgument("COUNT must not be negative"), True)
                continue
            task = self.loop.create_task(self._tick(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return []

    async def _tick(self, request: InferRequest) -> None:
        sender = request.response_sender
        assert sender is not None
        count = _count(request)
        for i in range(count):
            await asyncio.sleep(0.001 if count > 100 else 0)
            if request.cancelled:
                self.stopped_at.append(i)
                sender(Cancelled("Request was cancelled"), True)
                return
            sender(_response(request, i), i == count - 1)
        if count == 0:
            sender(None, True)


class ThreadTicker(SyncInstance):
    """The blocking twin: the same responses, sent from the instance's thread."""

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        for request in requests:
            sender = request.response_sender
            assert sender is not None
            count = _count(request)
            if count < 0:
                sender(InvalidArgument("COUNT must not be negative"), True)
                continue
            for i in range(count):
                sender(_response(request, i), i == count - 1)
            if count == 0:
                sender(None, True)
        return []


class MixedSender(SyncInstance):
    """Sends response 0 from its thread while the loop is busy, then response 1 from the loop:
    the loop's must not overtake the one still on its way."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        (request,) = requests
        sender = request.response_sender
        assert sender is not None
        busy, sent = threading.Event(), threading.Event()

        def on_loop() -> None:  # holds the loop until response 0 is handed over, then sends 1
            busy.set()
            sent.wait(5)
            sender(_response(request, 1), True)

        self.loop.call_soon_threadsafe(on_loop)
        busy.wait(5)
        sender(_response(request, 0), False)
        sent.set()
        return []


class DeferredEcho(AsyncInstance):
    """Answers each batch once the loop sets its future, 20 ms later (work done elsewhere): counts
    how many of its executions were outstanding at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.outstanding = 0
        self.most = 0
        self.delay = 0.02
        self.futures: list[asyncio.Future[Any]] = []

    async def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)
        future = self.loop.create_future()
        self.futures.append(future)

        def answer() -> None:
            self.outstanding -= 1
            future.set_result([_response(r, _count(r)) for r in requests])

        self.loop.call_later(self.delay, answer)
        return await future


class TickerModel(Model):
    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self.name, self.loop = name, loop
        self.instances: list[Instance] = []

    def create_instance(self, spec: InstanceSpec) -> Instance:
        instance = {"on_loop": LoopTicker, "mixed": MixedSender, "deferred": DeferredEcho}.get(self.name)
        made = ThreadTicker() if instance is None else instance(self.loop)
        self.instances.append(made)
        return made


class TickerBackend(Backend):
    name = "ticker"
    models: ClassVar[dict[str, TickerModel]] = {}

    def load_model(self, context: ModelLoadContext) -> Model:
        assert context.loop is not None, "a server hands backends its loop"
        model = self.models[context.name] = TickerModel(context.name, context.loop)
        return model


class Plugin:
    @hookimpl
    def inferd_register_backends(self, register: BackendRegister) -> None:
        register("ticker", TickerBackend)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    root = tmp_path_factory.mktemp("models")
    models = {name: {"config.pbtxt": CONFIG % name, "1/.keep": ""} for name in MODELS}
    models["deferred"] = {"config.pbtxt": DEFERRED_CONFIG % "deferred", "1/.keep": ""}
    started = InProcessServer([write_repository(root, models)], plugins=[Plugin()]).start()
    yield started
    started.stop()


def _request(model: str, count: int) -> InferRequest:
    tensor = InferTensor.from_array("COUNT", np.array([count], dtype=np.int32))
    return InferRequest(model, "", f"{model}-{count}", inputs={"COUNT": tensor})


def _on_loop(server: InProcessServer, coro: Any) -> Any:
    loop = server.server.health.loop
    assert loop is not None
    return asyncio.run_coroutine_threadsafe(coro, loop).result(10)


def _stream(server: InProcessServer, model: str, count: int) -> list[tuple[int | str, bool]]:
    """Every item the data plane streams: (index, final) of responses, (message, True) of errors."""

    async def collect() -> list[tuple[int | str, bool]]:
        items: list[tuple[int | str, bool]] = []
        async for item in server.server.dataplane.stream(_request(model, count)):
            if isinstance(item, InferdError):
                items.append((item.message, True))
            else:
                out = item.output("INDEX")
                items.append((-1 if out is None else int(out.data[0]), item.final))
        return items

    result: list[tuple[int | str, bool]] = _on_loop(server, collect())
    return result


def _ticker(model: str) -> Instance:
    return TickerBackend.models[model].instances[0]


def test_a_non_blocking_instance_executes_on_the_servers_loop_thread_with_no_thread_of_its_own(
    server: InProcessServer,
) -> None:
    assert _stream(server, "on_loop", 5) == [(0, False), (1, False), (2, False), (3, False), (4, True)]
    ticker = _ticker("on_loop")
    assert isinstance(ticker, LoopTicker)
    assert ticker.calls[-1] == ("inferd-test-server", True)  # InProcessServer's loop thread, the context's loop
    threads = {t.name for t in threading.enumerate()}
    assert "inferd-on_loop_0_0" not in threads and "inferd-threaded_0_0" in threads  # <group>_<index>


def test_responses_and_errors_arrive_as_from_the_blocking_twin(server: InProcessServer) -> None:
    for count in (3, 1, 0):
        assert _stream(server, "on_loop", count) == _stream(server, "threaded", count)
    assert _stream(server, "on_loop", 0) == []  # the sender's None closes the stream with no response
    error = [("COUNT must not be negative", True)]
    assert _stream(server, "on_loop", -1) == _stream(server, "threaded", -1) == error


def _counts(server: InProcessServer, model: str) -> dict[str, Any]:
    (stats,) = server.server.local.statistics_entries(model)
    infer = stats["inference_stats"]
    responses = {i: {k: v["count"] for k, v in r.items()} for i, r in stats["response_stats"].items()}
    return {"executions": stats["execution_count"], "inferences": stats["inference_count"],
            "success": infer["success"]["count"], "fail": infer["fail"]["count"], "responses": responses}  # fmt: skip


def _settled(server: InProcessServer, model: str) -> dict[str, Any]:
    """The counts once they stop moving: a decoupled stream ends with its final response, and the
    execution that sent it is recorded a moment later (after ``execute`` returned)."""
    counts = _counts(server, model)
    for _ in range(50):
        time.sleep(0.1)
        again = _counts(server, model)
        if again == counts:
            return again
        counts = again
    return counts


def test_statistics_are_counted_as_for_the_blocking_twin(server: InProcessServer) -> None:
    before = {m: _settled(server, m) for m in ("on_loop", "threaded")}
    for model in ("on_loop", "threaded"):
        for count in (2, 3, 0, -1):
            _stream(server, model, count)
    grown = {}
    for model in ("on_loop", "threaded"):
        after = _settled(server, model)
        grown[model] = {k: after[k] - before[model][k] for k in ("executions", "inferences", "success", "fail")}
        grown[model]["first"] = after["responses"]["0"]["success"] - before[model]["responses"].get("0", {}).get(
            "success", 0
        )
    # 4 executions; the error request fails; 2 + 3 requests sent a first response.
    assert grown["on_loop"] == grown["threaded"] == {"executions": 4, "inferences": 3, "success": 3, "fail": 1,
                                                     "first": 2}  # fmt: skip


def test_closing_the_stream_cancels_the_request_on_the_loop(server: InProcessServer) -> None:
    async def read_three() -> list[int]:
        stream = server.server.dataplane.stream(_request("on_loop", 100_000))
        seen = []
        async for item in stream:
            assert isinstance(item, InferResponse)
            seen.append(int(item.outputs[0].data[0]))
            if len(seen) == 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        return seen

    assert _on_loop(server, read_three()) == [0, 1, 2]
    ticker = _ticker("on_loop")
    assert isinstance(ticker, LoopTicker)
    deadline = time.monotonic() + 5
    while not ticker.stopped_at and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ticker.stopped_at and 3 <= ticker.stopped_at[-1] < 1000  # it stopped soon after, far before the end


def test_a_response_sent_on_the_loop_stays_behind_one_another_thread_sent_first(server: InProcessServer) -> None:
    assert _stream(server, "mixed", 1) == [(0, False), (1, True)]


def test_a_non_blocking_instance_may_answer_with_a_future_and_stays_busy_until_it_is_done(
    server: InProcessServer,
) -> None:
    async def both() -> list[list[tuple[int | str, bool]]]:
        async def one(count: int) -> list[tuple[int | str, bool]]:
            return [(int(r.output("INDEX").data[0]), r.final) async for r in server.server.dataplane.stream(
                _request("deferred", count))]  # fmt: skip

        return list(await asyncio.gather(one(7), one(8), one(9)))

    assert _on_loop(server, both()) == [[(7, True)], [(8, True)], [(9, True)]]
    deferred = TickerBackend.models["deferred"].instances[0]
    assert isinstance(deferred, DeferredEcho) and deferred.most == 1  # one execution at a time
    stats = _on_loop(server, server.server.dataplane.model_statistics("deferred"))[0].inference_stats
    assert stats["success"].count == 3 and stats["compute_infer"].ns >= 3 * 15_000_000  # timed to the answer


def test_a_caller_cancelled_while_its_future_executes_leaves_at_once_and_the_instance_stays_busy(
    server: InProcessServer,
) -> None:
    deferred = _ticker("deferred")
    assert isinstance(deferred, DeferredEcho)

    async def one(count: int) -> list[int]:
        return [
            int(r.output("INDEX").data[0]) async for r in server.server.dataplane.stream(_request("deferred", count))
        ]

    async def cancel_one_then_run_another() -> tuple[bool, bool, list[int]]:
        deferred.delay = 0.5
        try:
            first = asyncio.ensure_future(one(5))
            deadline = time.monotonic() + 5
            while deferred.outstanding == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0)
            future = deferred.futures[-1]
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            left_while_it_ran = not future.done()
            second = await one(6)  # waits for the instance: the first execution still holds it
            return left_while_it_ran, future.cancelled(), second
        finally:
            deferred.delay = 0.02

    assert _on_loop(server, cancel_one_then_run_another()) == (True, False, [6])
    assert deferred.most == 1
