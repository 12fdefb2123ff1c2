"""``inferd serve --workers 2``: one server made of two processes sharing its ports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e.whoami import WHOAMI, whoami
from tests.metrics_text import sample, scrape
from tests.waiting import wait_for


def fresh(url: str) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(url)


def on_new_connections(url: str, ask, times: int = 16) -> list:
    """``ask(client)`` over ``times`` new connections: both workers answer some of them."""
    answers = []
    for _ in range(times):
        client = fresh(url)
        try:
            answers.append(ask(client))
        finally:
            client.close()
    return answers


def metric(srv: ServerProcess, family: str, model: str) -> float:
    text = scrape(srv, timeout=10)
    value = sample(text, family, model=model, version="1")
    assert value is not None, text
    return value


def worker_pids(url: str) -> set[int]:
    """The serving pids, found by asking until two distinct ones answered."""
    seen: set[int] = set()

    def both() -> bool:
        seen.add(whoami(url))
        return len(seen) >= 2

    wait_for(both, what="both workers")
    return seen


@pytest.fixture
def repo(tmp_path):
    return write_repository(tmp_path / "models", {"whoami": WHOAMI})


def test_requests_spread_and_statistics_count_every_worker(repo):
    with ServerProcess([repo], ["--workers", "2"]) as srv:
        sent = 40
        pids = [whoami(srv.http_url) for _ in range(sent)]
        assert srv.proc.pid not in pids  # the supervisor serves nothing (both workers do: the end)

        # Every answer counts all 40, whichever worker gives it.
        for stats in on_new_connections(srv.http_url, lambda c: c.get_inference_statistics("whoami"), 8):
            (entry,) = stats["model_stats"]
            assert entry["inference_stats"]["success"]["count"] == sent
            assert entry["inference_count"] == sent and entry["execution_count"] == sent
            assert sum(b["compute_infer"]["count"] for b in entry["batch_stats"]) == sent
        for _ in range(8):
            assert metric(srv, "nv_inference_request_success", "whoami") == sent
            assert metric(srv, "nv_inference_count", "whoami") == sent
        for _ in range(4):
            client = grpcclient.InferenceServerClient(srv.grpc_url)
            stats = client.get_inference_statistics("whoami", as_json=True)
            assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) == sent
            assert client.is_server_ready()
            client.close()

        # Log settings changed through one worker hold on every worker.
        fresh(srv.http_url).update_log_settings({"log_verbose_level": 2})
        levels = on_new_connections(srv.http_url, lambda c: c.get_log_settings()["log_verbose_level"], 12)
        assert levels == [2] * 12
        fresh(srv.http_url).update_trace_settings(settings={"trace_rate": "7"})
        rates = on_new_connections(srv.http_url, lambda c: c.get_trace_settings()["trace_rate"], 12)
        assert rates == ["7"] * 12
        assert len(worker_pids(srv.http_url) - {srv.proc.pid}) == 2


def test_explicit_load_and_unload_apply_to_every_worker(repo):
    write_repository(repo, {"other": WHOAMI})
    args = ["--workers", "2", "--model-control-mode=explicit", "--load-model=whoami"]
    with ServerProcess([repo], args) as srv:
        assert on_new_connections(srv.http_url, lambda c: c.is_model_ready("other")) == [False] * 16
        fresh(srv.http_url).load_model("other")
        assert on_new_connections(srv.http_url, lambda c: c.is_model_ready("other")) == [True] * 16
        assert len({whoami(srv.http_url, "other") for _ in range(24)}) == 2

        fresh(srv.http_url).load_model("other", config='{"backend": "python", "instance_group": [{"count": 1}]}')
        counts = on_new_connections(srv.http_url, lambda c: c.get_model_config("other")["instance_group"][0]["count"])
        assert counts == [1] * 16

        fresh(srv.http_url).unload_model("other")
        assert on_new_connections(srv.http_url, lambda c: c.is_model_ready("other")) == [False] * 16
        with pytest.raises(InferenceServerException):
            fresh(srv.http_url).load_model("missing")


def test_a_killed_worker_fails_its_requests_is_restarted_and_catches_up(repo):
    write_repository(repo, {"other": WHOAMI})
    args = ["--workers", "2", "--model-control-mode=explicit", "--load-model=whoami"]
    with ServerProcess([repo], args) as srv:
        fresh(srv.http_url).load_model("other")
        fresh(srv.http_url).update_trace_settings(settings={"trace_rate": "9"})
        pids = worker_pids(srv.http_url)
        victim = min(pids)

        # Slow requests on new connections land on both workers; the victim's must fail, not hang.
        outcomes: list[str] = []
        calls = [threading.Thread(target=_slow_call, args=(srv.http_url, outcomes)) for _ in range(12)]
        for t in calls:
            t.start()
        readiness: list[bool] = []
        probe = threading.Thread(target=_probe_readiness, args=(srv.http_url, readiness, 6.0))
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        probe.start()
        started = time.monotonic()
        for t in calls:
            t.join(30)
        probe.join()
        assert not any(t.is_alive() for t in calls) and time.monotonic() - started < 30
        assert len(outcomes) == 12 and "ok" in outcomes, outcomes
        assert any(o.startswith("error") for o in outcomes), outcomes

        # Until the new worker is ready the server is not; then both serve again, "other" included.
        assert False in readiness, readiness
        srv.wait_ready(60)
        new = worker_pids(srv.http_url)
        assert victim not in new and len(new) == 2
        assert len({whoami(srv.http_url, "other") for _ in range(24)}) == 2
        assert on_new_connections(srv.http_url, lambda c: c.get_trace_settings()["trace_rate"]) == ["9"] * 16
        assert f"(pid {victim}) was killed by SIGKILL; restarting it" in srv.log()
    assert srv.proc.returncode == 0


def _slow_call(url: str, outcomes: list[str]) -> None:
    try:
        whoami(url, ms=3000, timeout=20)
        outcomes.append("ok")
    except Exception as exc:  # the connection closed under the request
        outcomes.append(f"error {type(exc).__name__}: {exc}")


def _probe_readiness(url: str, seen: list[bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a connection the dying worker had accepted: not an answer
            seen.append(fresh(url).is_server_ready())
        time.sleep(0.02)


def test_sigterm_stops_every_worker(repo):
    srv = ServerProcess([repo], ["--workers", "2"]).start()
    pids = worker_pids(srv.http_url)
    assert srv.stop(30) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_failing_at_start_up_stops_the_server_with_its_error(repo):
    with socket.socket() as taken:  # a port held by another program, without SO_REUSEPORT
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = ServerProcess([repo], ["--workers", "2"])
        srv.http_port = taken.getsockname()[1]
        proc = subprocess.run(srv.command(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"error: HTTP frontend cannot bind 127.0.0.1:{srv.http_port}: Address already in use" in proc.stderr
    assert "before it was ready; stopping" in proc.stderr


def test_workers_share_the_port_0_the_supervisor_picked(repo, tmp_path):
    ports_file = tmp_path / "ports.json"
    cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(repo), "--workers", "2",
           "--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
           "--ports-file", str(ports_file)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: ports_file.exists() or proc.poll() is not None, what="the ports file")
        ports = json.loads(ports_file.read_text())
        assert {"http", "grpc", "metrics"} <= set(ports) and 0 not in ports.values()
        assert len(worker_pids(f"127.0.0.1:{ports['http']}")) == 2  # both workers listen on the one port
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as client:
            assert client.is_server_live()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
