"""The canary's fast trip (docs/traffic.md, "Fast trip"), against a real ``inferd serve``: a canary
that fails every request is rolled back within a few failures, not at the next bucket of the
window; one that fails as often as the stable version is not rolled back."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e.traffic_models import CONFIG, call, parameters
from tests.metrics_text import metric

# Version v fails request n (counted by the version itself, from 1) when (n - 1) % PERIOD < BURST.
MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        self.seen = 0

    def execute(self, requests):
        out = []
        for r in requests:
            self.seen += 1
            if (self.seen - 1) % {period} < {burst}:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("version {{}} broke".format(self.version))))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("V", np.array([self.version], np.int32))]))
        return out
"""
ALWAYS, NEVER = (1, 1), (1, 0)
#: The fast trip's documented bound: a canary failing every request is rolled back by its 10th failure
#: once the stable version has answered 3 requests in the window.
BOUND = 10
#: Requests in flight at once in the concurrent runs (each may be on the canary when it trips).
DEPTH = 8
# Wide latency slack: on a busy machine a few slow requests must not roll anything back by latency.
PARAMS = {"traffic_split": "1:50,2:50", "canary_p95_slack_ms": "5000"}


def needed(stable_requests: int, stable_failures: int = 0, margin: float = 0.05) -> int:
    """The failure (of a canary failing every request) the documented rule trips on: the first k >= 5
    with q**k <= 1e-6, q = (stable failures + 1) / (stable requests + 2) + margin."""
    q = (stable_failures + 1) / (stable_requests + 2) + margin
    return max(5, math.ceil(math.log(1e-6) / math.log(q) - 1e-9))


def model(versions: dict[int, tuple[int, int]], **params: str) -> dict[str, str]:
    """Model "c": version v fails in bursts of ``versions[v][1]`` every ``versions[v][0]`` requests."""
    files = {"config.pbtxt": CONFIG.format(name="c", parameters=parameters(**params)) + "version_policy: { all: {} }\n"}
    for v, (period, burst) in versions.items():
        files[f"{v}/model.py"] = MODEL_PY.format(period=period, burst=burst)
    return files


@pytest.fixture
def start(tmp_path: Path):
    servers: list[ServerProcess] = []

    def run(files: dict[str, str], *args: str) -> ServerProcess:
        server = ServerProcess([write_repository(tmp_path / "models", {"c": files})], list(args))
        servers.append(server.start())
        return server

    yield run
    for server in servers:
        server.stop()


def inputs() -> list[httpclient.InferInput]:
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    return [x]


def outcome(result: Any) -> str:
    """The version that answered, or "failed <version>" (the version its error names)."""
    try:
        return str(result.get_result().get_response()["model_version"])
    except InferenceServerException as exc:
        error = str(exc)
    broke = re.search(r"version (\d+) broke", error)
    assert broke, error
    return f"failed {broke.group(1)}"


def concurrently(server: ServerProcess, n: int, prefix: str) -> list[str]:
    """Send ``n`` unversioned requests, ``DEPTH`` in flight at a time; the outcome of each."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=DEPTH)
    try:
        pending = [client.async_infer("c", inputs(), request_id=f"{prefix}-{i}") for i in range(n)]
        return [outcome(p) for p in pending]
    finally:
        client.close()


def traffic(server: ServerProcess) -> dict[str, Any]:
    code, shown = call(server, "GET", "/v2/models/c/traffic")
    assert code == 200, shown
    return shown


def rolled_back_after(server: ServerProcess) -> None:
    """The rollback is in force and shown everywhere: weight 0, nothing more reaches the canary."""
    shown = traffic(server)
    assert shown["weights"] == {"1": 50, "2": 0} and shown["versions"]["2"]["state"] == "rolled back"
    assert set(concurrently(server, 200, "after")) == {"1"}
    index = {r["version"]: r for r in call(server, "POST", "/v2/repository/index", {})[1]}
    assert index["2"]["traffic"] == "rolled back (weight 0)" and "failure rate 100.00%" in index["2"]["reason"]
    assert metric(server, "inferd_traffic_weight", model="c", version="2") == 0


def test_always_failing_canary_trips_within_the_bound_sequentially(start) -> None:
    # The default window (60 s, 10 buckets of 6 s) and 100 requests per version: the bucket rule alone
    # would let 100+ requests fail first.
    server = start(model({1: NEVER, 2: ALWAYS}, **PARAMS))
    client = httpclient.InferenceServerClient(server.http_url)
    outcomes: list[str] = []
    # fixed ids: the split (by each id's CRC-32) is the same on every run
    while traffic(server)["versions"]["2"]["state"] != "rolled back":
        assert len(outcomes) < 300, f"not rolled back after {outcomes.count('failed 2')} failures: {traffic(server)}"
        outcomes.append(outcome(client.async_infer("c", inputs(), request_id=f"seq-{len(outcomes)}")))
    failures = outcomes.count("failed 2")
    decision = traffic(server)["decisions"][-1]
    assert decision["action"] == "rollback" and decision["canary_version"] == 2
    canary, stable = decision["canary"], decision["stable"]
    # the rollback came on the failure that made the rule true (sequential: the client saw every one)
    assert canary["failures"] == canary["requests"] == failures
    assert stable["failures"] == 0 and stable["requests"] == outcomes.count("1")
    assert stable["requests"] >= 3 and needed(stable["requests"]) <= failures <= BOUND, (outcomes, decision)
    assert decision["verdict"].startswith("failure rate 100.00%") and "fast trip" in decision["rule"]
    assert "canary version 2 rolled back: failure rate 100.00%" in server.log()
    rolled_back_after(server)


def test_always_failing_canary_trips_within_the_bound_concurrently(start) -> None:
    server = start(model({1: NEVER, 2: ALWAYS}, **PARAMS))
    outcomes = concurrently(server, 400, "par")  # the run: 208 of these 400 failed
    failures = outcomes.count("failed 2")
    decisions = traffic(server)["decisions"]
    assert decisions, f"not rolled back: {failures} of 400 requests failed"
    decision = decisions[-1]
    assert decision["action"] == "rollback" and decision["canary"]["failures"] == decision["canary"]["requests"]
    assert needed(decision["stable"]["requests"]) <= decision["canary"]["failures"] <= BOUND, decision
    # the requests already running on the canary when it tripped fail too; nothing after
    assert failures <= decision["canary"]["failures"] + DEPTH - 1, outcomes
    rolled_back_after(server)


def test_every_worker_takes_the_rollback(start) -> None:
    server = start(model({1: NEVER, 2: ALWAYS}, **PARAMS), "--workers", "2")
    outcomes = concurrently(server, 400, "workers")
    failures = outcomes.count("failed 2")
    # each worker judges the requests it served: at most the bound each, plus those in flight
    assert failures <= 2 * BOUND + DEPTH - 1, outcomes
    for _ in range(20):  # a new connection each time: the kernel deals them to both workers
        shown = traffic(server)
        assert shown["weights"] == {"1": 50, "2": 0} and shown["versions"]["2"]["state"] == "rolled back"
    assert set(concurrently(server, 200, "after")) == {"1"}


@pytest.mark.parametrize("fails", [(10, 1), (50, 5)], ids=["every-10th", "bursts-of-5-every-50"])
def test_canary_failing_as_often_as_stable_is_not_rolled_back(start, fails: tuple[int, int]) -> None:
    server = start(model({1: fails, 2: fails}, **PARAMS))
    outcomes = concurrently(server, 300, "flaky")
    client = httpclient.InferenceServerClient(server.http_url)
    outcomes += [outcome(client.async_infer("c", inputs(), request_id=f"flaky-seq-{i}")) for i in range(200)]
    shown = traffic(server)
    assert shown["weights"] == {"1": 50, "2": 50} and shown["decisions"] == [], shown
    assert shown["versions"]["2"]["state"] == "canary" and shown["versions"]["2"]["rollbacks"] == 0
    # the workload was what it says: each version failed its share of its own requests
    period, burst = fails
    for version in ("1", "2"):
        failed = outcomes.count(f"failed {version}")
        served = outcomes.count(version) + failed
        full, rest = divmod(served, period)
        assert served >= 150 and failed == full * burst + min(rest, burst), (version, served, failed)
