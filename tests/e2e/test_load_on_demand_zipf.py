"""Issue 36's done-when test, scaled to a loaded 2-core machine: a repository of 16 Python models
each holding 16 MB, a budget that holds 4 of them, Zipf-distributed traffic over HTTP and gRPC for
a bounded time. 0 failed requests; the server's peak resident memory (VmHWM) stays within its base
+ the budget + a stated margin; every eviction was of an idle model; cold and warm latency reported."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source

MB = 1 << 20
MODELS = 16
HOLDS = 16  # MB each model holds
BUDGET = int(4.5 * HOLDS * MB)  # room for 4 models
#: What the peak may pass base + budget by: one model loading while the budget is full (it is
#: measured after its load) and the interpreter's own growth under traffic (buffers, threads, heap).
MARGIN = HOLDS * MB + 48 * MB
SECONDS = 12.0
ZIPF_S = 1.1


def _config(i: int) -> str:
    return source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(HOLDS)).replace("IDENT", str(i))


def _status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


def _metric(srv: ServerProcess, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE))


def test_zipf_traffic_over_more_models_than_the_budget_holds(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "models",
        {f"m{i:02d}": {"config.pbtxt": _config(i), "1/model.py": source("memory_hog")} for i in range(MODELS)},
    )
    flags = ["--workers", "1", "--model-load-on-demand=true", f"--model-memory-budget={BUDGET}"]
    with ServerProcess([repo], flags) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        base = _status(pid, "VmRSS")
        weights = np.array([1 / (k + 1) ** ZIPF_S for k in range(MODELS)])
        weights /= weights.sum()
        failures: list[str] = []
        latencies: list[tuple[str, float]] = []
        lock = threading.Lock()
        stop = time.monotonic() + SECONDS

        def drive(seed: int, grpc: bool) -> None:
            rng = random.Random(seed)
            client = (
                grpcclient.InferenceServerClient(srv.grpc_url)
                if grpc
                else httpclient.InferenceServerClient(srv.http_url, network_timeout=120)
            )
            module = grpcclient if grpc else httpclient
            while time.monotonic() < stop:
                i = rng.choices(range(MODELS), weights)[0]
                x = module.InferInput("MS", [1], "INT32")
                x.set_data_from_numpy(np.array([2], dtype=np.int32))
                started = time.perf_counter()
                try:
                    got = int(client.infer(f"m{i:02d}", [x]).as_numpy("ID")[0])
                    if got != i:
                        raise AssertionError(f"m{i:02d} answered {got}")
                except Exception as exc:  # every failure is reported, none is expected
                    with lock:
                        failures.append(f"m{i:02d}: {exc}")
                    continue
                with lock:
                    latencies.append((f"m{i:02d}", time.perf_counter() - started))

        threads = [threading.Thread(target=drive, args=(n, n % 2 == 1)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = _status(pid, "VmHWM")
        loads = _metric(srv, "inferd_model_loads_on_demand_total")
        load_sum = _metric(srv, "inferd_model_load_on_demand_duration_seconds_sum")
        evictions = _metric(srv, "inferd_model_evictions_total")
    log = srv.log_path.read_text()  # once stopped, and whole (log() is its tail)

    assert not failures, failures[:5]
    assert latencies and evictions > 0 and loads > 4
    assert peak <= base + BUDGET + MARGIN, (peak / MB, base / MB, BUDGET / MB, MARGIN / MB)
    # every eviction logged that its model had nothing in flight, queued or waiting
    evicted = re.findall(r"model '(m\d+)' evicted \(idle [\d.]+ s, (\d+) requests in flight or queued", log)
    assert len(evicted) == evictions and all(n == "0" for _, n in evicted), evicted[:5]
    # cold requests are the first of a model after it loaded: the slowest `loads` ones, at most
    ordered = sorted(s for _, s in latencies)
    cold = ordered[-int(loads) :]
    warm = ordered[: -int(loads)]
    print(
        f"\n{len(latencies)} requests, {int(loads)} loads on demand, {int(evictions)} evictions, "
        f"hit rate {1 - loads / len(latencies):.1%}; peak RSS {peak / MB:.0f} MiB (base {base / MB:.0f} + "
        f"budget {BUDGET / MB:.0f} + margin {MARGIN / MB:.0f}); warm p50 {np.percentile(warm, 50) * 1e3:.1f} ms "
        f"p99 {np.percentile(warm, 99) * 1e3:.1f} ms; cold p50 {np.percentile(cold, 50) * 1e3:.1f} ms "
        f"p99 {np.percentile(cold, 99) * 1e3:.1f} ms; mean load {load_sum / loads * 1e3:.1f} ms"
    )
