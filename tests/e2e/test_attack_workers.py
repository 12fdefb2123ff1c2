"""``inferd serve --workers 2`` when workers fail: killed, stopped, or their supervisor killed.

Counters summed over the workers never go down (Prometheus would read a reset), a stopped worker
blocks no other request and is restarted, a killed supervisor's worker directory is removed by the
next one, and the OpenAI port is not opened by default when no model it serves is loaded.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.metrics_text import sample, scrape
from tests.python_models import python_model, source
from tests.sockets import listening_ports
from tests.waiting import wait_for

# PID = the process serving the request. Two instances: one in each worker.
WHOAMI = python_model("whoami", config=source("whoami", "config.pbtxt").replace("count: 8", "count: 2"))
INFER_BODY = json.dumps({"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [0]}]}).encode()
FAST_EXIT = ["--exit-timeout-secs", "2"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_repository(tmp_path / "models", {"whoami": WHOAMI})


def whoami(url: str, timeout: float = 10.0) -> int:
    """The pid that served one request, over a new connection (the kernel picks the worker)."""
    client = httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        inp = httpclient.InferInput("MS", [1], "INT32")
        inp.set_data_from_numpy(np.array([0], np.int32))
        return int(client.infer("whoami", [inp]).as_numpy("PID")[0])
    finally:
        client.close()


def up(srv: ServerProcess) -> None:
    """Wait until the supervisor saw every worker ready (from then on it restarts one that dies)."""
    wait_for(lambda: "all 2 workers ready" in srv.log(), what="the supervisor to see its workers ready")


def infer_on_both(url: str, at_least: int) -> tuple[int, set[int]]:
    """Requests on new connections until both workers served some and ``at_least`` were sent."""
    seen: set[int] = set()
    sent = 0
    deadline = time.monotonic() + 90
    while (sent < at_least or len(seen) < 2) and time.monotonic() < deadline:
        seen.add(whoami(url))
        sent += 1
    assert len(seen) == 2, seen
    return sent, seen


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def stats_counts(url: str) -> tuple[int, int] | None:
    """(success count, inference count) of whoami, from whichever worker answers; None: no answer."""
    try:
        client = httpclient.InferenceServerClient(url, connection_timeout=5, network_timeout=10)
        try:
            (entry,) = client.get_inference_statistics("whoami")["model_stats"]
        finally:
            client.close()
    except Exception:  # a connection the dying worker had accepted, or a worker not ready yet
        return None
    return int(entry["inference_stats"]["success"]["count"]), int(entry["inference_count"])


def metric_counts(srv: ServerProcess) -> tuple[int, int] | None:
    """(nv_inference_request_success, nv_inference_count) of whoami from one scrape; None: no answer."""
    try:
        text = scrape(srv, timeout=10)
    except OSError:
        return None
    success = sample(text, "nv_inference_request_success", model="whoami", version="1")
    count = sample(text, "nv_inference_count", model="whoami", version="1")
    return None if success is None or count is None else (int(success), int(count))


def watch_counters(srv: ServerProcess, readings: list[tuple[str, tuple[int, int]]], stop: threading.Event) -> None:
    """Read statistics and metrics over new connections until ``stop``; every answer is kept."""
    while not stop.is_set():
        for kind, value in (("stats", stats_counts(srv.http_url)), ("metrics", metric_counts(srv))):
            if value is not None:
                readings.append((kind, value))
        time.sleep(0.02)


def worker_pids(srv: ServerProcess) -> set[int]:
    """The pids of the supervisor's live children."""
    children = Path(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read_text().split()
    return {int(p) for p in children if alive(int(p))}


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` SIGSTOPped for the block (continued after, if it is still there)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def pinned_connections(url: str, pid: int, count: int) -> tuple[list[http.client.HTTPConnection], int]:
    """``count`` kept-alive HTTP connections that the worker ``pid`` accepted, and the number of
    requests it took to find them."""
    host, port = url.split(":")
    mine: list[http.client.HTTPConnection] = []
    for sent in range(1, 201):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v2/models/whoami/infer", INFER_BODY, {"Content-Type": "application/json"})
        served_by = json.loads(conn.getresponse().read())["outputs"][0]["data"][0]
        if served_by == pid:
            mine.append(conn)
            if len(mine) == count:
                return mine, sent
        else:
            conn.close()
    raise AssertionError(f"no connection landed on worker {pid}")


def test_counters_never_go_down_when_a_worker_is_killed(repo: Path) -> None:
    with ServerProcess([repo], ["--workers", "2", *FAST_EXIT]) as srv:
        up(srv)
        sent, pids = infer_on_both(srv.http_url, 20)
        wait_for(lambda: stats_counts(srv.http_url) == (sent, sent), what="statistics of every worker")
        wait_for(lambda: metric_counts(srv) == (sent, sent), what="metrics of every worker")

        readings: list[tuple[str, tuple[int, int]]] = []
        stop = threading.Event()
        watcher = threading.Thread(target=watch_counters, args=(srv, readings, stop))
        watcher.start()
        try:
            victim = min(pids)
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: f"(pid {victim}) was killed by SIGKILL; restarting it" in srv.log(), what="the restart")
            wait_for(lambda: len(worker_pids(srv) - {victim}) == 2, what="a new worker")
            srv.wait_ready(90)
            wait_for(lambda: len(readings) >= 20, what="readings after the restart")
        finally:
            stop.set()
            watcher.join(60)
        assert readings and all(value == (sent, sent) for _, value in readings), readings
        # New traffic after the restart adds to what the dead worker had counted.
        more, _ = infer_on_both(srv.http_url, 4)
        wait_for(lambda: stats_counts(srv.http_url) == (sent + more, sent + more), what="statistics after more")
        wait_for(lambda: metric_counts(srv) == (sent + more, sent + more), what="metrics after more")


def test_a_stopped_peer_blocks_no_other_request_and_keeps_its_counts(repo: Path) -> None:
    with ServerProcess([repo], ["--workers", "2", *FAST_EXIT]) as srv:
        up(srv)
        sent, pids = infer_on_both(srv.http_url, 10)
        victim, survivor = sorted(pids)
        (stats_conn, live_conn), pinning = pinned_connections(srv.http_url, survivor, 2)
        sent += pinning
        wait_for(lambda: stats_counts(srv.http_url) == (sent, sent), what="statistics of every worker")

        with stopped(victim):
            finished: dict[str, float] = {}
            answers: dict[str, bytes] = {}

            def stats() -> None:
                stats_conn.request("GET", "/v2/models/whoami/stats")
                answers["stats"] = stats_conn.getresponse().read()
                finished["stats"] = time.monotonic()

            asking = threading.Thread(target=stats)
            asking.start()
            time.sleep(0.3)  # the stats request is waiting for the stopped worker
            live_conn.request("GET", "/v2/health/live")
            live = live_conn.getresponse()
            live.read()
            assert live.status == 200
            finished["live"] = time.monotonic()
            asking.join(60)
            # The loop answered while the stats request waited for the stopped worker (the old code
            # blocked it for 2 s: health waited behind statistics).
            assert finished["live"] < finished["stats"], finished
            (entry,) = json.loads(answers["stats"])["model_stats"]
            # The stopped worker's counts are still in the sum (its last report).
            assert int(entry["inference_stats"]["success"]["count"]) == sent, entry

            # A shared-memory registration is applied on every worker: it waits for the stopped
            # one too, and the loop keeps answering meanwhile (the old code blocked it).
            region = shared_memory.SharedMemory(create=True, size=64)
            try:

                def register() -> None:
                    body = json.dumps({"key": f"/{region.name}", "offset": 0, "byte_size": 64})
                    stats_conn.request("POST", "/v2/systemsharedmemory/region/r/register", body)
                    answers["register"] = stats_conn.getresponse().read()
                    finished["register"] = time.monotonic()

                asking = threading.Thread(target=register)
                asking.start()
                time.sleep(0.3)
                live_conn.request("GET", "/v2/health/live")
                live = live_conn.getresponse()
                live.read()
                assert live.status == 200
                finished["live"] = time.monotonic()
                asking.join(60)
                assert finished["live"] < finished["register"], (finished, answers)
                stats_conn.request("POST", "/v2/systemsharedmemory/unregister", b"")
                done = stats_conn.getresponse()
                done.read()
                assert done.status == 200, answers
            finally:
                region.close()
                region.unlink()
    for conn in (stats_conn, live_conn):
        conn.close()


def test_a_stopped_worker_is_killed_and_restarted(repo: Path) -> None:
    args = ["--workers", "2", "--worker-health-timeout", "3", *FAST_EXIT]
    with ServerProcess([repo], args) as srv:
        up(srv)
        sent, pids = infer_on_both(srv.http_url, 6)
        wait_for(lambda: stats_counts(srv.http_url) == (sent, sent), what="statistics of every worker")
        victim = min(pids)
        with stopped(victim):
            wait_for(lambda: not alive(victim), what="the stopped worker killed")
        log = srv.log()
        found = re.search(rf"worker \d \(pid {victim}\) did not answer its health check for (\S+) s", log)
        assert found and float(found.group(1)) >= 3, log
        wait_for(lambda: len(worker_pids(srv) - {victim}) == 2, what="a new worker")
        srv.wait_ready(90)
        assert victim not in infer_on_both(srv.http_url, 1)[1]
        value = stats_counts(srv.http_url)
        assert value is not None and value[0] >= sent, value


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR of its own, short enough for the workers' Unix socket paths (108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="iw-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_killed_supervisors_directory_is_removed_by_the_next(repo: Path, short_tmp: Path) -> None:
    tmp = short_tmp
    env = {"TMPDIR": str(tmp)}
    # A live process's directory (this test's pid) is not a stale one.
    kept = tmp / f"inferd-workers-{os.getpid()}-keepme"
    kept.mkdir()
    first = ServerProcess([repo], ["--workers", "2", *FAST_EXIT], env=env).start()
    try:
        workers = worker_pids(first)
        (left,) = [p for p in tmp.glob("inferd-workers-*") if p != kept]
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        wait_for(lambda: not any(alive(p) for p in workers), what="the orphaned workers to exit")
        assert left.is_dir()  # nobody cleaned up after the killed supervisor
    finally:
        first.stop()
    with ServerProcess([repo], ["--workers", "2", *FAST_EXIT], env=env) as second:
        assert not left.exists(), second.log()
        assert kept.is_dir()
        assert len([p for p in tmp.glob("inferd-workers-*") if p != kept]) == 1
        assert f"removed {left}, left by a supervisor that was killed" in second.log()


def test_openai_port_is_not_opened_by_default_without_a_model_it_serves(repo: Path) -> None:
    pytest.importorskip("inferd_frontend_openai")
    with ServerProcess([repo]) as srv:
        wait_for(lambda: "serving:" in srv.log(), "the start-up summary", 30)
        assert listening_ports(srv.proc.pid) == {srv.http_port, srv.grpc_port, srv.metrics_port}
    # A plain serve says nothing about the API it does not serve (the reason is at debug level).
    assert "OpenAI" not in srv.log()


def test_openai_not_serving_is_logged_at_debug_level(repo: Path) -> None:
    pytest.importorskip("inferd_frontend_openai")
    with ServerProcess([repo], args=["--log-verbose", "1"]) as srv:
        wait_for(lambda: "OpenAI API not served: no loaded model" in srv.log(), "the debug line", 30)


SLOW_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(4)  # the workers are still starting while the test kills one

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def test_a_worker_killed_while_starting_is_restarted_not_fatal(tmp_path: Path) -> None:
    """A worker killed by a signal before the server was first ready (by someone else, or in the
    moment between its readiness and the supervisor hearing of it) is restarted; only a worker that
    exits by itself while starting (a bad flag, a port in use) stops the server."""
    slow = {"config.pbtxt": 'backend: "python"\nmax_batch_size: 0\n', "1/model.py": SLOW_PY}
    repo = write_repository(tmp_path / "models", {"slow": slow})
    srv = ServerProcess([repo], ["--workers", "2", *FAST_EXIT])
    srv.ports_path.unlink(missing_ok=True)
    log_file = open(srv.log_path, "ab")  # noqa: SIM115 - stop() closes it; started by hand: start() would wait for a server that is up
    srv._log, srv.proc = log_file, subprocess.Popen(srv.command(), stdout=log_file, stderr=subprocess.STDOUT,
                                                    env=srv.env)  # fmt: skip
    try:
        supervisor = srv.proc.pid
        wait_for(lambda: len(_children(supervisor)) == 2, timeout=30, what="two workers")
        victim = _children(supervisor)[0]
        os.kill(victim, signal.SIGKILL)
        srv.wait_ports(120)
        srv.wait_ready(120)
        assert srv.proc.poll() is None, srv.log()
        assert f"(pid {victim}) was killed by SIGKILL; restarting it" in srv.log(), srv.log()
    finally:
        srv.stop()
