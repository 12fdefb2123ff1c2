"""``--model-load-on-demand`` and ``--model-memory-budget`` end to end: a model loads on its first
request (HTTP and gRPC), concurrent first requests share one load, idle models are evicted least
recently used first while a busy or pinned one never is, a load that finds no room is refused with
Retry-After, the index shows EVICTED, statistics survive an eviction, and the metrics count it all.

Every model is ``memory_hog`` (tests/fixtures/python_models): it answers its own ``id`` after
sleeping the milliseconds it is sent, and holds MEGABYTES of resident memory while loaded."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.triton_clients import repository_index

MB = 1 << 20


def hog(ident: int, megabytes: int, pin: bool = False, init_s: float = 0.0) -> dict[str, str]:
    """``memory_hog`` holding ``megabytes``, answering ``ident`` (pinned by its config with ``pin``;
    ``init_s``: initialize sleeps that long first)."""
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(megabytes)).replace("IDENT", str(ident))
    if pin:
        config += 'parameters { key: "pin" value { string_value: "true" } }\n'
    code = source("memory_hog")
    if init_s:
        code = code.replace(
            "    def initialize(self, args):\n", f"    def initialize(self, args):\n        time.sleep({init_s})\n"
        )
    return {"config.pbtxt": config, "1/model.py": code}


def http_call(url: str, model: str, ms: int = 0) -> int:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    x = httpclient.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.array([ms], dtype=np.int32))
    return int(client.infer(model, [x]).as_numpy("ID")[0])


def grpc_call(url: str, model: str, ms: int = 0) -> int:
    client = grpcclient.InferenceServerClient(url)
    x = grpcclient.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.array([ms], dtype=np.int32))
    return int(client.infer(model, [x], client_timeout=120).as_numpy("ID")[0])


def metric(srv: ServerProcess, name: str, model: str | None = None) -> float:
    """One sample of ``/metrics`` (0 when absent)."""
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    label = "" if model is None else rf'\{{model="{re.escape(model)}"\}}'
    found = re.search(rf"^{re.escape(name)}{label} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def states(srv: ServerProcess) -> dict[str, str]:
    index = repository_index(httpclient.InferenceServerClient(srv.http_url))
    return {name: state for (name, _), (state, _) in index.items()}


def test_first_request_loads_the_model_over_http_and_grpc(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {f"m{i}": hog(i, 1) for i in range(3)})
    with ServerProcess([repo], ["--model-load-on-demand=true"]) as srv:
        assert states(srv) == {"m0": "", "m1": "", "m2": ""}  # nothing loaded at start
        assert "load on demand" in srv.log() and "no memory budget" in srv.log()
        assert http_call(srv.http_url, "m0") == 0
        assert grpc_call(srv.grpc_url, "m1") == 1
        assert states(srv) == {"m0": "READY", "m1": "READY", "m2": ""}
        assert http_call(srv.http_url, "m0") == 0  # warm: no second load
        assert metric(srv, "inferd_model_loads_on_demand_total", "m0") == 1
        assert metric(srv, "inferd_model_loads_on_demand_total", "m1") == 1
        assert metric(srv, "inferd_model_load_on_demand_duration_seconds_count") == 2
        # a model in no repository is still Triton's unknown model
        response = requests.post(f"http://{srv.http_url}/v2/models/nope/infer", json={"inputs": []}, timeout=10)
        assert response.status_code == 404 and "unknown model" in response.json()["error"]


def test_concurrent_first_requests_share_one_load(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"slow": hog(7, 1, init_s=1.5)})
    with ServerProcess([repo], ["--model-load-on-demand=true"]) as srv:
        calls = [(http_call if i % 2 else grpc_call, srv.http_url if i % 2 else srv.grpc_url) for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda c: c[0](c[1], "slow"), calls))
        assert got == [7] * 8
        assert metric(srv, "inferd_model_loads_on_demand_total", "slow") == 1
        assert srv.log().count("successfully loaded 'slow' version 1") == 1


def test_a_request_past_the_timeout_gets_503_with_retry_after_and_the_load_goes_on(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"slow": hog(3, 1, init_s=3)})
    with ServerProcess([repo], ["--model-load-on-demand=true", "--model-load-on-demand-timeout-secs=1"]) as srv:
        body = {"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [0]}]}
        response = requests.post(f"http://{srv.http_url}/v2/models/slow/infer", json=body, timeout=30)
        assert response.status_code == 503, response.text
        assert (
            "'slow'" in response.json()["error"] and "--model-load-on-demand-timeout-secs" in response.json()["error"]
        )
        assert int(response.headers["retry-after"]) >= 1
        assert states(srv)["slow"] == "LOADING"  # initialize sleeps 3 s: the load goes on
        deadline = time.monotonic() + 30
        while states(srv)["slow"] != "READY" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert http_call(srv.http_url, "slow") == 3  # the load went on; the retry is warm


def test_lru_eviction_under_a_budget_never_takes_a_busy_or_pinned_model(tmp_path: Path) -> None:
    # each model holds 40 MB; the budget holds three of them (plus what a load measures besides):
    # pinned, busy and one more
    repo = write_repository(
        tmp_path / "models",
        {"busy": hog(0, 40), "b": hog(1, 40), "c": hog(2, 40), "d": hog(3, 40), "pinned": hog(4, 40, pin=True)},
    )
    flags = ["--model-load-on-demand=true", f"--model-memory-budget={int(3.5 * 40 * MB)}"]
    with ServerProcess([repo], flags) as srv:
        log = srv.log()
        assert "memory budget 140 MiB" in log
        assert states(srv)["pinned"] == "READY"  # pinned models load at start
        # busy loads first (the least recently used) and stays busy for 6 s
        assert http_call(srv.http_url, "busy") == 0
        slow: list[int] = []
        worker = threading.Thread(target=lambda: slow.append(grpc_call(srv.grpc_url, "busy", 6000)))
        worker.start()
        time.sleep(0.5)
        assert http_call(srv.http_url, "b") == 1  # evicts nothing it may not: busy is busy, pinned is pinned
        assert grpc_call(srv.grpc_url, "c") == 2
        assert http_call(srv.http_url, "d") == 3
        now = states(srv)
        assert now["busy"] == "READY" and now["pinned"] == "READY", now
        assert now["b"] == "EVICTED" and now["c"] == "EVICTED" and now["d"] == "READY", now
        worker.join()
        assert slow == [0]  # the busy model's request finished, on the version it started on
        index = repository_index(httpclient.InferenceServerClient(srv.http_url))
        assert "memory budget" in index[("b", "1")][1]
        assert metric(srv, "inferd_model_evictions_total", "busy") == 0
        assert metric(srv, "inferd_model_evictions_total", "pinned") == 0
        assert metric(srv, "inferd_model_evictions_total", "b") == 1
        assert metric(srv, "inferd_model_footprint_bytes", "d") >= 40 * MB
        assert metric(srv, "inferd_model_memory_budget_bytes") == int(3.5 * 40 * MB)
        assert 0 < metric(srv, "inferd_model_memory_budget_used_bytes") <= int(3.5 * 40 * MB) + 10 * MB
        # b's statistics survive its eviction: one request before, one after
        assert http_call(srv.http_url, "b") == 1
        stats = httpclient.InferenceServerClient(srv.http_url).get_inference_statistics("b")["model_stats"][0]
        assert int(stats["inference_count"]) == 2
        evicted = re.findall(r"model '(\w+)' evicted \(idle [\d.]+ s, 0 requests in flight", srv.log())
        assert evicted and "busy" not in evicted and "pinned" not in evicted


def test_no_room_waits_then_refuses_with_the_reason_and_harms_nothing(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"a": hog(0, 40), "b": hog(1, 40)})
    flags = [
        "--model-load-on-demand=true",
        f"--model-memory-budget={50 * MB}",
        "--model-load-on-demand-timeout-secs=1.5",
        "--model-pin=b",
    ]
    with ServerProcess([repo], flags) as srv:
        assert states(srv)["b"] == "READY"  # pinned by the flag: loaded at start
        body = {"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [0]}]}
        response = requests.post(f"http://{srv.http_url}/v2/models/a/infer", json=body, timeout=30)
        assert response.status_code == 503, response.text
        message = response.json()["error"]
        assert "'a'" in message and "--model-memory-budget" in message and "b" in message
        assert response.headers.get("retry-after")
        assert http_call(srv.http_url, "b") == 1  # what serves is unharmed
        assert metric(srv, "inferd_model_load_on_demand_refused_total", "a") >= 1
