"""The dynamic batcher: batch planning in isolation, then a real server driven by tritonclient.

The Python models log every ``execute`` call (rows, request count, first value of each request)
to a file, so the tests assert on what the batcher actually formed, never on timings alone.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.config import parse_config_text
from inferd.contracts.backend import InstanceSpec, SyncInstance
from inferd.contracts.errors import Unavailable
from inferd.contracts.scheduler import SchedulerContext
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.engine.recorder import Recorder
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from inferd.engine.version import ModelVersion
from inferd.schedulers.batching.batches import plan_batch
from inferd.schedulers.dynamic import DynamicBatchScheduler
from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

# -- batch planning ------------------------------------------------------------------------------


@dataclass
class Item:
    rows: int = 1
    shape_key: tuple[Any, ...] = ()
    enqueue_ns: int = 0


def test_plan_takes_everything_queued_without_delay():
    assert plan_batch([Item(), Item(), Item()], 8, frozenset({8}), 8, 0, 10) == (3, 0)


def test_plan_waits_for_more_within_the_delay():
    count, wait = plan_batch([Item(enqueue_ns=0)], 8, frozenset({8}), 8, 1000, 400)
    assert (count, wait) == (0, 600)
    assert plan_batch([Item(enqueue_ns=0)], 8, frozenset({8}), 8, 1000, 1000) == (1, 0)


def test_plan_prefers_the_largest_preferred_size():
    items = [Item() for _ in range(7)]
    assert plan_batch(items, 8, frozenset({2, 4, 8}), 8, 10**9, 0) == (4, 0)


def test_plan_stops_at_max_rows_and_at_a_different_shape():
    assert plan_batch([Item(rows=3), Item(rows=3), Item(rows=3)], 8, frozenset(), 8, 0, 0) == (2, 0)
    items = [Item(shape_key=("a",)), Item(shape_key=("a",)), Item(shape_key=("b",)), Item(shape_key=("a",))]
    assert plan_batch(items, 8, frozenset(), 8, 0, 0) == (2, 0)
    # The batch cannot grow past the different shape, so it goes without waiting for the delay.
    assert plan_batch(items, 8, frozenset(), 8, 10**9, 0) == (2, 0)


S = 10**10  # a delay no test reaches
PREF = frozenset({2, 6})
ZERO = frozenset({4, 6})


def _items(*rows: int | tuple[int, str]) -> list[Item]:
    return [Item(rows=r) if isinstance(r, int) else Item(rows=r[0], shape_key=(r[1],)) for r in rows]


# Triton's QA cases (qa/L0_batcher/batcher_test.py, all requests queued when the instance frees)
# and what its GetDynamicBatch takes: (rows queued, preferred, delay ns, waited ns) -> count taken
# now, 0 meaning "wait". max_batch_size is 8 throughout.
TRITON_CASES = {
    "static_batch_preferred": ((2,), PREF, S, 0, 1),
    "static_batch_lt_any_preferred": ((1,), PREF, S, 0, 0),
    "static_batch_not_preferred": ((3,), PREF, S, 0, 0),
    "static_batch_gt_max_preferred": ((7,), PREF, S, 0, 1),
    "multi_batch_sum_gt_max_preferred": ((3, 4), PREF, S, 0, 1),
    "multi_batch_sum_gt_max_preferred, delay spent": ((3, 4), PREF, S, S, 2),
    "multi_batch_gt_max_preferred": ((3, 7), PREF, S, 0, 1),
    "multi_batch_use_best_preferred": ((1, 1, 1), PREF, S, 0, 2),
    "multi_batch_use_biggest_preferred": ((1,) * 6, PREF, S, 0, 6),
    "seven past the largest preferred": ((1,) * 7, PREF, S, 0, 6),
    "multi_batch_not_preferred": ((1, 3), PREF, S, 0, 0),
    "multi_batch_not_preferred, delay spent": ((1, 3), PREF, S, S, 2),
    "multi_batch_different_shape": (((1, "a"), (1, "b")), PREF, S, 0, 1),
    "multi_batch_preferred_different_shape": (((1, "a"), (1, "a"), (1, "b")), PREF, S, 0, 2),
    "preferred_batch_only_aligned": ((1,) * 4, ZERO, 0, 0, 4),
    "preferred_batch_only_unaligned": ((1,) * 5, ZERO, 0, 0, 4),
    "preferred_batch_only_use_biggest_preferred": ((1,) * 7, ZERO, 0, 0, 6),
    "preferred_batch_only_use_no_preferred_size": ((1,) * 3, ZERO, 0, 0, 3),
    "default preferred (max_batch_size), no delay": ((1, 1, 1), frozenset({8}), 0, 0, 3),
    "default preferred, rows past max_batch_size": ((3, 3, 3), frozenset({8}), 0, 0, 2),
    "default preferred, within the delay": ((1, 1, 1), frozenset({8}), S, 0, 0),
    "default preferred, full batch": ((4, 4, 1), frozenset({8}), S, 0, 2),
}


@pytest.mark.parametrize("case", TRITON_CASES, ids=list(TRITON_CASES))
def test_plan_matches_tritons_decision(case):
    rows, preferred, delay, waited, expected = TRITON_CASES[case]
    count, wait = plan_batch(_items(*rows), 8, preferred, max(preferred), delay, waited)
    assert count == expected
    assert wait == (delay - waited if expected == 0 else 0)


# -- the scheduler in-process: nothing lost, nothing duplicated, workers end on stop --------------


class Echo(SyncInstance):
    """Returns each request's input doubled; records the batch sizes it was given."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def execute(self, requests):
        self.batches.append(sum(r.inputs["IN"].shape[0] for r in requests))
        time.sleep(0.002)
        out = []
        for r in requests:
            x = r.inputs["IN"].data
            out.append(InferResponse("echo", "1", r.id, [InferTensor.from_array("OUT", x * 2)]))
        return out


ECHO_CONFIG = """
name: "echo"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 %s }
"""


def _version(extra: str = "", instances: int = 2) -> tuple[ModelVersion, list[Echo]]:
    config = parse_config_text(ECHO_CONFIG % extra, "echo/config.pbtxt")
    echoes = [Echo() for _ in range(instances)]
    recorder = Recorder(ModelStats("echo", "1"), config.max_batch_size)
    specs = [InstanceSpec(f"echo_{i}", "KIND_CPU", 0, i, "echo") for i in range(instances)]
    runners = [Runner(e, spec, recorder) for e, spec in zip(echoes, specs, strict=True)]
    scheduler = DynamicBatchScheduler(SchedulerContext("echo", 1, config, runners, recorder))
    return ModelVersion("echo", 1, config, None, runners, scheduler, recorder.stats), echoes


def _request(i: int, rows: int = 1, **params: Any) -> InferRequest:
    data = np.full((rows, 1), i, dtype=np.float32)
    return InferRequest("echo", id=str(i), inputs={"IN": InferTensor.from_array("IN", data)}, parameters=params)


def test_many_concurrent_requests_each_answered_once_with_its_rows():
    version, echoes = _version()
    scheduler = version.scheduler

    async def main() -> list[InferResponse]:
        requests = [_request(i, rows=1 + i % 3) for i in range(300)]
        responses = await asyncio.gather(*(version.infer(r) for r in requests))
        await scheduler.stop()
        assert all(t.done() for t in scheduler._workers)
        return responses

    try:
        responses = asyncio.run(main())
    finally:
        version.close()
    for i, response in enumerate(responses):
        assert response.id == str(i)
        np.testing.assert_array_equal(response.output("OUT").data, np.full((1 + i % 3, 1), 2 * i))
    rows = sum(1 + i % 3 for i in range(300))
    assert sum(sum(e.batches) for e in echoes) == rows
    assert max(b for e in echoes for b in e.batches) > 1
    assert all(b <= 8 for e in echoes for b in e.batches)
    stats = version.stats.as_dict()
    assert stats["inference_count"] == rows
    assert stats["inference_stats"]["success"]["count"] == 300


def test_queue_full_is_rejected_and_counted():
    version, _ = _version("default_queue_policy { max_queue_size: 2 }", instances=1)
    scheduler = version.scheduler

    async def main() -> list[Any]:
        results = await asyncio.gather(*(version.infer(_request(i)) for i in range(30)), return_exceptions=True)
        await scheduler.stop()
        return results

    try:
        results = asyncio.run(main())
    finally:
        version.close()
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors and all(isinstance(e, Unavailable) for e in errors)
    assert all(str(e).endswith("Exceeds maximum queue size") for e in errors)
    assert version.stats.failures == {"REJECTED": len(errors)}
    assert len(errors) + version.stats.as_dict()["inference_stats"]["success"]["count"] == 30


# -- a real server ---------------------------------------------------------------------------------

MODEL_PY = source("dynamic_batcher")


def _config(name: str, log: Path, batching: str, max_batch_size: int = 8, count: int = 1, sleep: str = "0") -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [
          {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }},
          {{ name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }},
          {{ name: "END" data_type: TYPE_FP64 dims: [ 1 ] }}
        ]
        instance_group [ {{ count: {count} kind: KIND_CPU }} ]
        dynamic_batching {{ {batching} }}
        parameters {{ key: "sleep" value: {{ string_value: "{sleep}" }} }}
        parameters {{ key: "log" value: {{ string_value: "{log}" }} }}
    """)


MODELS = {
    # name: (dynamic_batching body, max_batch_size, instance count, sleep)
    "batch8": ("max_queue_delay_microseconds: 300000", 8, 1, "0.05"),
    "ordered": ("preserve_ordering: true", 4, 2, "input"),
    "unordered": ("", 4, 2, "input"),
    "prio": ("priority_levels: 3 default_priority_level: 2", 1, 1, "input"),
    "timeouts": (
        "default_queue_policy { default_timeout_microseconds: 5000000 allow_timeout_override: true }",
        1,
        1,
        "input",
    ),
    "delayed": (
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true }",
        1,
        1,
        "input",
    ),
    "qfull": ("default_queue_policy { max_queue_size: 1 }", 1, 1, "input"),
    "nobatch": ("max_queue_delay_microseconds: 100000", 0, 1, "0.02"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("dynamic")
    logs = root / "logs"
    logs.mkdir()
    models = {
        name: {"config.pbtxt": _config(name, logs / f"{name}.jsonl", body, mbs, count, sleep), "1/model.py": MODEL_PY}
        for name, (body, mbs, count, sleep) in MODELS.items()
    }
    repo = write_repository(root / "models", models)
    srv = serve(repo)
    srv.logs = logs
    return srv


def _executions(server: ServerProcess, model: str) -> list[dict[str, Any]]:
    path = server.logs / f"{model}.jsonl"  # type: ignore[attr-defined]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _infer(url: str, model: str, data: np.ndarray, **kw: Any) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    try:
        inp = httpclient.InferInput("IN", list(data.shape), "FP32")
        inp.set_data_from_numpy(data.astype(np.float32))
        return client.infer(model, [inp], **kw)
    finally:
        client.close()


def _started(server: ServerProcess, model: str) -> int:
    path = server.logs / f"{model}.jsonl.started"  # type: ignore[attr-defined]
    return len(path.read_text().splitlines()) if path.exists() else 0


def _concurrently(calls: list[tuple[float, Any]], blocker: tuple[ServerProcess, str] | None = None) -> list[Any]:
    """Run ``(start delay s, zero-arg callable)`` pairs on threads; results (or exceptions) in order.

    With ``blocker=(server, model)`` the first call goes alone, and the others' delays count from
    the moment the model started executing it (so they queue behind it on a busy machine too).
    """
    results: list[Any] = [None] * len(calls)
    received: list[float] = [0.0] * len(calls)

    def run(i: int, delay: float, fn: Any) -> None:
        time.sleep(delay)
        try:
            results[i] = fn()
        except Exception as exc:
            results[i] = exc
        received[i] = time.time()

    threads = [threading.Thread(target=run, args=(i, d, fn)) for i, (d, fn) in enumerate(calls)]
    rest = threads
    if blocker is not None:
        before = _started(*blocker)
        threads[0].start()
        deadline = time.monotonic() + 60
        while _started(*blocker) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        rest = threads[1:]
    for t in rest:
        t.start()
    for t in threads:
        t.join(120)
    _concurrently.received = received  # type: ignore[attr-defined]
    return results


def test_concurrent_clients_are_batched_and_get_their_own_rows(server):
    url = server.http_url
    n = 24
    inputs = [np.array([[i, i + 0.5]] * (1 + i % 2), dtype=np.float32) for i in range(n)]
    results = _concurrently([(0.0, lambda a=a: _infer(url, "batch8", a)) for a in inputs])
    for a, result in zip(inputs, results, strict=True):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("OUT"), a * 2)
    executions = _executions(server, "batch8")
    assert max(e["rows"] for e in executions) > 1
    assert all(e["rows"] <= 8 for e in executions)
    # No request lost or run twice.
    assert sorted(v for e in executions for v in e["values"]) == [float(i) for i in range(n)]
    stats = httpclient.InferenceServerClient(url).get_inference_statistics("batch8")["model_stats"][0]
    rows = sum(a.shape[0] for a in inputs)
    assert stats["inference_count"] == rows
    assert stats["execution_count"] == len(executions)
    assert {b["batch_size"] for b in stats["batch_stats"]} == {e["rows"] for e in executions}


def test_requests_with_different_shapes_are_not_merged(server):
    url = server.http_url
    inputs = [np.full((1, 2 + i % 3), i, dtype=np.float32) for i in range(12)]
    results = _concurrently([(0.0, lambda a=a: _infer(url, "batch8", a)) for a in inputs])
    for a, result in zip(inputs, results, strict=True):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("OUT"), a * 2)


def test_max_batch_size_zero_runs_each_request_alone(server):
    url = server.http_url
    inputs = [np.array([i, i], dtype=np.float32) for i in range(6)]
    results = _concurrently([(0.0, lambda a=a: _infer(url, "nobatch", a)) for a in inputs])
    for a, result in zip(inputs, results, strict=True):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("OUT"), a * 2)
        assert result.as_numpy("BATCH").tolist() == [1]
    assert all(e["n"] == 1 for e in _executions(server, "nobatch"))


@pytest.mark.parametrize("model", ["ordered", "unordered"])
def test_preserve_ordering_holds_later_responses(server, model):
    # Two instances: the slow first request (1200 ms) and a fast second one (10 ms) run side by
    # side. With preserve_ordering the second response may only leave after the first finished.
    url = server.http_url
    results = _concurrently([
        (0.0, lambda: _infer(url, model, np.array([[1200.0]]))),
        (0.1, lambda: _infer(url, model, np.array([[10.0]]))),
    ], blocker=(server, model))  # fmt: skip
    first_end = float(results[0].as_numpy("END")[0, 0])
    second_received = _concurrently.received[1]  # type: ignore[attr-defined]
    if model == "ordered":
        assert second_received >= first_end
    else:
        assert second_received < first_end
    assert results[1].as_numpy("OUT").tolist() == [[20.0]]


def test_higher_priority_overtakes_queued_requests(server):
    url = server.http_url
    calls = [(0.0, lambda: _infer(url, "prio", np.array([[1500.0]])))]  # occupies the only instance
    plan = [(1.0, 3), (2.0, 3), (3.0, 0), (4.0, 1), (5.0, 9)]  # (value, priority); 9 is out of range
    for k, (value, priority) in enumerate(plan):
        kw = {"priority": priority} if priority else {}
        calls.append((0.1 * k, lambda v=value, kw=kw: _infer(url, "prio", np.array([[v]]), **kw)))
    results = _concurrently(calls, blocker=(server, "prio"))
    assert not any(isinstance(r, Exception) for r in results), results
    order = [e["values"][0] for e in _executions(server, "prio")]
    # Level 1 first, then the default level 2 (priority 0 and out-of-range 9) in arrival order, then 3.
    assert order == [1500.0, 4.0, 3.0, 5.0, 1.0, 2.0]


def test_request_timeout_rejects_with_triton_status(server):
    url = server.http_url
    results = _concurrently([
        (0.0, lambda: _infer(url, "timeouts", np.array([[1000.0]]))),
        (0.0, lambda: _infer(url, "timeouts", np.array([[1.0]]), timeout=100_000)),  # 0.1 s: expires
        (0.0, lambda: _infer(url, "timeouts", np.array([[2.0]]))),  # the 5 s default: served
        (0.0, lambda: _infer(url, "timeouts", np.array([[3.0]]), timeout=60_000_000)),  # longer: default wins
    ], blocker=(server, "timeouts"))  # fmt: skip
    assert isinstance(results[1], InferenceServerException)
    assert results[1].status() == "503"
    assert "Request timeout expired" in results[1].message()
    for r in (results[0], results[2], results[3]):
        assert not isinstance(r, Exception), r
    stats = httpclient.InferenceServerClient(url).get_inference_statistics("timeouts")["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert 1.0 not in [e["values"][0] for e in _executions(server, "timeouts")]


def test_delay_action_moves_expired_requests_behind(server):
    url = server.http_url
    results = _concurrently([
        (0.0, lambda: _infer(url, "delayed", np.array([[800.0]]))),
        (0.0, lambda: _infer(url, "delayed", np.array([[1.0]]), timeout=1000)),
        (0.1, lambda: _infer(url, "delayed", np.array([[2.0]]))),
        (0.2, lambda: _infer(url, "delayed", np.array([[3.0]]))),
    ], blocker=(server, "delayed"))  # fmt: skip
    assert not any(isinstance(r, Exception) for r in results), results
    assert [e["values"][0] for e in _executions(server, "delayed")] == [800.0, 2.0, 3.0, 1.0]


def test_full_queue_rejects_with_triton_status(server):
    url = server.http_url
    results = _concurrently([
        (0.0, lambda: _infer(url, "qfull", np.array([[1000.0]]))),
        (0.0, lambda: _infer(url, "qfull", np.array([[1.0]]))),  # waits in the queue (size 1)
        (0.3, lambda: _infer(url, "qfull", np.array([[2.0]]))),  # finds it full
    ], blocker=(server, "qfull"))  # fmt: skip
    assert not isinstance(results[0], Exception) and not isinstance(results[1], Exception)
    assert isinstance(results[2], InferenceServerException)
    assert results[2].status() == "503"
    assert "Exceeds maximum queue size" in results[2].message()


def test_bad_priority_parameter_is_invalid_argument(server):
    # tritonclient refuses reserved keys in 'parameters', so send the JSON by hand.
    body = {
        "parameters": {"priority": "high"},
        "inputs": [{"name": "IN", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
    }
    req = urllib.request.Request(
        f"http://{server.http_url}/v2/models/prio/infer",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)
    assert info.value.code == 400
    assert "'priority'" in json.loads(info.value.read())["error"]
