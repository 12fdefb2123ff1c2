"""A rolling restart without Kubernetes: two `inferd serve` behind a client that balances over the
endpoints a Service would list (those whose /v2/health/ready answers 200, polled as the kubelet's
readiness probe does). One server gets SIGTERM under load at c=16: no request fails, its readiness
goes false before its listener closes, and it exits within its grace period."""

from __future__ import annotations

import http.client
import itertools
import json
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

from inferd.testing import ServerProcess
from tests.deploy.conftest import ADD_SUB_BODY, ADD_SUB_SUM, copy_add_sub
from tests.waiting import wait_for

CONCURRENCY = 16
DRAIN_DELAY_S = 1.5  # the Deployment's --drain-delay-secs, shortened
EXIT_TIMEOUT_S = 10.0
POLL_S = 0.25  # readiness probe period + endpoint propagation (the Deployment: 2 s and a 5 s drain delay)


@dataclass
class Endpoints:
    """The ready endpoints, as a Service's EndpointSlice holds them, kept by polling readiness
    (a refused connection counts as not ready, as a failed probe does)."""

    ports: list[int]
    ready: set[int] = field(default_factory=set)
    #: When each endpoint first left the set, and when it first *answered* not ready (400).
    unready_at: dict[int, float] = field(default_factory=dict)
    answered_unready_at: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        while not self.stop.is_set():
            for port in self.ports:
                status = _readiness(port)
                if status == 200:
                    self.ready.add(port)
                    continue
                now = time.monotonic()
                self.ready.discard(port)
                self.unready_at.setdefault(port, now)
                if status is not None:
                    self.answered_unready_at.setdefault(port, now)
            time.sleep(POLL_S)


def _readiness(port: int) -> int | None:
    """The status /v2/health/ready answers, None if the connection fails."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/v2/health/ready")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@dataclass
class Load:
    """CONCURRENCY clients, each with a keep-alive connection per endpoint, round-robin over the
    ready endpoints."""

    endpoints: Endpoints
    ok: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def client(self) -> None:
        conns: dict[int, http.client.HTTPConnection] = {}
        for n in itertools.count():
            if self.stop.is_set():
                return
            ready = sorted(self.endpoints.ready)
            if not ready:
                time.sleep(POLL_S)
                continue
            port = ready[n % len(ready)]
            conn = conns.setdefault(port, http.client.HTTPConnection("127.0.0.1", port, timeout=10))
            try:
                conn.request("POST", "/v2/models/add_sub/infer", ADD_SUB_BODY, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = json.loads(resp.read())
                assert resp.status == 200 and body["outputs"][0]["data"] == ADD_SUB_SUM, body
                self.ok[port] = self.ok.get(port, 0) + 1
            except Exception as exc:  # every failure is what the test counts
                self.failures.append(f"port {port}: {exc!r}")
                conn.close()
                conns.pop(port)


def _listener_closed_at(port: int, until: threading.Event) -> float | None:
    """When a TCP connect to ``port`` is first refused (polled every 5 ms)."""
    while not until.is_set():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return time.monotonic()
        time.sleep(0.005)
    return None


def test_sigterm_under_load_fails_no_request(tmp_path):
    repo = copy_add_sub(tmp_path / "models")
    args = [f"--drain-delay-secs={DRAIN_DELAY_S}", f"--exit-timeout-secs={EXIT_TIMEOUT_S}"]
    old = ServerProcess([repo], args, log_path=tmp_path / "old.log").start()
    new = ServerProcess([repo], args, log_path=tmp_path / "new.log").start()
    endpoints = Endpoints([old.http_port, new.http_port])
    load = Load(endpoints)
    threads = [threading.Thread(target=endpoints.poll)] + [
        threading.Thread(target=load.client) for _ in range(CONCURRENCY)
    ]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: min(load.ok.get(p, 0) for p in endpoints.ports) >= 20, "traffic on both servers")
        assert old.proc is not None
        served_before = load.ok[old.http_port]
        closed: list[float | None] = []
        watcher = threading.Thread(target=lambda: closed.append(_listener_closed_at(old.http_port, load.stop)))
        watcher.start()
        sigterm_at = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)
        returncode = old.proc.wait(DRAIN_DELAY_S + EXIT_TIMEOUT_S + 5)
        exited_at = time.monotonic()
        served_new = load.ok[new.http_port]
        wait_for(lambda: load.ok[new.http_port] >= served_new + 50, "traffic on the remaining server")
    finally:
        load.stop.set()
        endpoints.stop.set()
        for t in threads:
            t.join(15)
        old.stop()
        new.stop()
    watcher.join(5)
    assert load.failures == [], load.failures[:5]
    assert returncode == 0, old.log()
    said_unready_at = endpoints.answered_unready_at[old.http_port]
    assert closed and closed[0] is not None, "the old server's listener never closed"
    # Readiness answered false first, the listener still open for about the drain delay after it.
    assert sigterm_at < said_unready_at < closed[0], (sigterm_at, said_unready_at, closed[0])
    assert endpoints.unready_at[old.http_port] == said_unready_at
    assert closed[0] - sigterm_at >= DRAIN_DELAY_S
    assert exited_at - sigterm_at < DRAIN_DELAY_S + EXIT_TIMEOUT_S
    assert load.ok[old.http_port] > served_before  # it answered requests after SIGTERM too
