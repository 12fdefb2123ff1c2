"""Request capture (``--capture-config``) and ``inferd replay``, against a real ``inferd serve``
(docs/traffic.md, "Capture" and "Replay"): a 1 % capture lands within binomial bounds and writes
nothing it was told to redact; replaying a capture against the same version reproduces every output."""

from __future__ import annotations

import base64
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.release_models import infer_body, model, pipelined
from tests.metrics_text import metric

#: The chance a correct sampler falls outside the bounds below (both tails together).
FALSE_ALARM = 1e-6


def binomial_bounds(n: int, p: float, alpha: float = FALSE_ALARM) -> tuple[int, int]:
    """The smallest [lo, hi] with P(X < lo) + P(X > hi) <= alpha for X ~ Binomial(n, p), each tail
    at most alpha / 2 (exact: the binomial probabilities summed)."""
    log_pmf = (
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)
        for k in range(n + 1)
    )
    pmf = [math.exp(v) for v in log_pmf]
    lo, tail = 0, 0.0
    while tail + pmf[lo] <= alpha / 2:
        tail += pmf[lo]
        lo += 1
    hi, tail = n, 0.0
    while tail + pmf[hi] <= alpha / 2:
        tail += pmf[hi]
        hi -= 1
    return lo, hi


def records(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl")) for line in f.read_text().splitlines() if line]


def wait_for(directory: Path, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    """The records once ``count`` are written (the writer thread runs behind the answers)."""
    deadline = time.monotonic() + timeout
    while len(found := records(directory)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


@pytest.fixture
def start(tmp_path: Path):
    servers: list[ServerProcess] = []

    def run(models: dict[str, dict[str, str]], *args: str) -> ServerProcess:
        server = ServerProcess([write_repository(tmp_path / "models", models)], list(args))
        servers.append(server.start())
        return server

    yield run
    for server in servers:
        server.stop()


def test_binomial_bounds_are_what_the_test_claims() -> None:
    # by hand: 10 fair coins, P(0 heads) = P(10 heads) = 1/1024 <= 0.001, P(<= 1 head) = 11/1024 > 0.001
    assert binomial_bounds(10, 0.5, 0.002) == (1, 9)
    lo, hi = binomial_bounds(4000, 0.01)  # mean 40, sd 6.3; the upper tail is the longer (Poisson-like)
    assert (lo, hi) == (13, 74) and 40 - 5 * 6.3 < lo < 40 - 3 * 6.3 and 40 + 4 * 6.3 < hi < 40 + 6 * 6.3


def test_one_percent_capture_lands_within_binomial_bounds_and_redacts(start, tmp_path: Path) -> None:
    out = tmp_path / "capture"
    config = tmp_path / "capture.yaml"
    config.write_text(f"dir: {out}\nrate: 0.01\nredact:\n  inputs: [X]\n  parameters: [user_id, Authorization]\n")
    server = start({"m": model("m", {1: {}})}, "--capture-config", str(config))
    secret = "alice-7d41"
    http_n, grpc_n = 3000, 1000
    bodies = [infer_body(i, f"h{i}", user_id=secret, keep="visible") for i in range(http_n)]
    assert all(status == 200 for status, _ in pipelined(server, "m", bodies, depth=64))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for i in range(grpc_n):
        x = grpcclient.InferInput("X", [1], "INT32")
        x.set_data_from_numpy(np.array([i], np.int32))
        client.infer("m", [x], request_id=f"g{i}", parameters={"user_id": secret, "keep": "visible"})
    lo, hi = binomial_bounds(http_n + grpc_n, 0.01)
    # the count in /metrics is final once every answer is sent; the file is written behind it
    captured = metric(server, "inferd_capture_records_total", outcome="captured")
    assert lo <= captured <= hi, (lo, captured, hi)
    found = wait_for(out, int(captured))
    assert len(found) == captured and metric(server, "inferd_capture_records_total", outcome="dropped") == 0
    assert {r["id"][0] for r in found} <= {"h", "g"}
    text = "".join(f.read_text() for f in out.glob("*.jsonl"))
    assert secret not in text and base64.b64encode(secret.encode()).decode() not in text
    for r in found:
        assert r["model"] == "m" and r["version"] == "1" and r["error"] is None
        assert r["parameters"]["user_id"] == "<redacted>" and r["parameters"]["keep"] == "visible"
        (x,) = r["inputs"]
        assert x == {"name": "X", "datatype": "INT32", "shape": [1], "redacted": True}
        x_value = int(r["id"][1:])  # the test sent X = the number in the id
        y = {o["name"]: o for o in r["outputs"]}["Y"]
        assert np.frombuffer(base64.b64decode(y["data"]), "<i4").tolist() == [2 * x_value]


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "replay", *args], capture_output=True, text=True, timeout=300
    )


def test_replaying_a_capture_against_the_same_version_reproduces_every_output(start, tmp_path: Path) -> None:
    out = tmp_path / "capture"
    config = tmp_path / "capture.json"
    config.write_text(json.dumps({"dir": str(out), "rate": 1.0, "max_file_bytes": 20000, "max_files": 100}))
    # version 2 differs on 1 input in 50 (Y off by one): what a replay against it must report
    # (requests naming no version run on version 1: the split)
    server = start(
        {"m": model("m", {1: {}, 2: {"diverge": 50}}, traffic_split="1:100")}, "--capture-config", str(config)
    )
    assert all(s == 200 for s, _ in pipelined(server, "m", [infer_body(i, f"r{i}") for i in range(1, 201)], depth=64))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1000], np.int32))  # diverges on version 2: 1000 % 50 == 0
    client.infer("m", [x], model_version="1", request_id="g1")
    found = wait_for(out, 201)
    assert len(found) == 201 and len(list(out.glob("*.jsonl"))) > 1  # rotated past 20000 bytes
    snapshot = tmp_path / "snapshot"  # the server captures the replays too: replay what it had
    shutil.copytree(out, snapshot)
    for url in (server.http_url, f"grpc://{server.grpc_url}"):
        same = replay(str(snapshot), "--url", url, "--version", "1", "--json")
        assert same.returncode == 0, same.stdout + same.stderr
        shown = json.loads(same.stdout)
        assert (shown["replayed"], shown["agreed"], shown["disagreed"], shown["failed"]) == (201, 201, 0, 0), shown
        assert shown["latency_ms"]["p99"] is not None and shown["captured_latency_ms"]["p50"] is not None
    other = replay(str(snapshot), "--url", server.http_url, "--version", "2")
    assert other.returncode == 1, other.stdout + other.stderr
    assert "agreement: 196 of 201" in other.stdout and "BEYOND TOLERANCE" in other.stdout  # 50..200, 1000
    assert "output 'Y': max abs difference 1" in other.stdout
    missing = replay(str(tmp_path / "nope"), "--url", server.http_url)
    assert missing.returncode == 2 and "no capture at" in missing.stderr


def test_a_bad_capture_config_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "capture.yaml"
    config.write_text(f"dir: {tmp_path / 'c'}\nrate: 5\n")
    repo = write_repository(tmp_path / "models", {"m": model("m", {1: {}})})
    done = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(repo), "--capture-config",
         str(config), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "'rate' must be a number from 0 to 1 (0.01: 1 %), got 5" in done.stderr, done.stderr
