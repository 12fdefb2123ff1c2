"""Issue 36's done-when test: a repository of 40 models, half ONNX (onnxruntime) and half Python,
each holding SIZE MiB once loaded, under a budget that holds 8 of them; Zipf-distributed traffic
over HTTP and gRPC for SECONDS. 0 failed requests; the server's peak resident memory (VmHWM, from
/proc) stays within its base + the budget + a stated margin; every eviction was of an idle model;
cold and warm latency reported apart, per backend.

The issue's shape: 40 models x 48 MiB (~50 MB each; 1.9 GiB if all were loaded), a budget for 8
(408 MiB), a minute. ``INFERD_ZIPF_SECONDS`` and ``INFERD_ZIPF_MIB`` shorten or shrink a run."""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source

MB = 1 << 20
MODELS = 40
SIZE = int(os.environ.get("INFERD_ZIPF_MIB", "48"))  # MiB each model holds
HOLDS = 8
BUDGET = int((HOLDS + 0.5) * SIZE * MB)
#: Loads on demand of known footprints that run together (--model-load-on-demand-concurrency).
CONCURRENCY = 2
#: What the peak may pass base + budget by: onnxruntime's own runtime (imported by the first ONNX
#: load, after the base was read: ~30 MiB), one load beyond the full budget (a footprint is known
#: only after its load: a first load, which runs alone), the transient copies of the loads under
#: way (onnxruntime holds the parsed model file beside the initializers it builds from it: one
#: SIZE per load, CONCURRENCY of them), and the interpreter's growth under traffic (buffers,
#: threads, heap): 48 MiB.
MARGIN = 32 * MB + (1 + CONCURRENCY) * SIZE * MB + 48 * MB
SECONDS = float(os.environ.get("INFERD_ZIPF_SECONDS", "60"))
ZIPF_S = 1.1
CLIENTS = 4  # even: HTTP, odd: gRPC

ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 0
input [{ name: "MS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "ID" data_type: TYPE_INT64 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
"""


def _onnx_model(ident: int) -> bytes:
    """ID = W[MS] as INT64, W a float32 initializer of SIZE MiB, every element ``ident``: the
    initializer feeds the output, so onnxruntime keeps it (resident) after its optimizations."""
    w = numpy_helper.from_array(np.full(SIZE * MB // 4, ident, dtype=np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["W", "MS"], ["G"]),
            helper.make_node("Cast", ["G"], ["ID"], to=TensorProto.INT64),
        ],
        "g",
        [helper.make_tensor_value_info("MS", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("ID", TensorProto.INT64, [1])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _backend(i: int) -> str:
    return "onnx" if i % 2 else "python"


def _entry(i: int) -> dict[str, str | bytes]:
    if _backend(i) == "onnx":
        return {"config.pbtxt": ONNX_CONFIG, "1/model.onnx": _onnx_model(i)}
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(SIZE)).replace("IDENT", str(i))
    return {"config.pbtxt": config, "1/model.py": source("memory_hog")}


def _status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


def _metric(srv: ServerProcess, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE))


def _loads(log: str) -> list[tuple[str, float, float]]:
    """(model, when its load ended as a Unix time, how long it took) for each load on demand in the
    log (glog lines, local time, as ``time.time()`` reads it on this machine)."""
    year = datetime.now().year
    found = re.findall(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*model '(m\d+)' loaded on demand in ([\d.]+) s", log, re.M)
    return [
        (name, datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f").timestamp(), float(took))
        for stamp, name, took in found
    ]


def _ms(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q) * 1e3:.1f}" if values else "-"


@pytest.mark.slow
def test_zipf_traffic_over_more_models_than_the_budget_holds(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {f"m{i:02d}": _entry(i) for i in range(MODELS)})
    flags = [
        "--workers",
        "1",
        "--model-load-on-demand=true",
        f"--model-memory-budget={BUDGET}",
        f"--model-load-on-demand-concurrency={CONCURRENCY}",
    ]
    with ServerProcess([repo], flags) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        base = _status(pid, "VmRSS")
        weights = np.array([1 / (k + 1) ** ZIPF_S for k in range(MODELS)])
        weights /= weights.sum()
        failures: list[str] = []
        #: (model, started, ended) in Unix time, and the latency in perf_counter seconds
        requests_done: list[tuple[str, float, float, float]] = []
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
                wall, started = time.time(), time.perf_counter()
                try:
                    got = int(client.infer(f"m{i:02d}", [x]).as_numpy("ID")[0])
                    if got != i:
                        raise AssertionError(f"m{i:02d} answered {got}")
                except Exception as exc:  # every failure is reported, none is expected
                    with lock:
                        failures.append(f"m{i:02d}: {exc}")
                    continue
                took = time.perf_counter() - started
                with lock:
                    requests_done.append((f"m{i:02d}", wall, wall + took, took))

        threads = [threading.Thread(target=drive, args=(n, n % 2 == 1)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = _status(pid, "VmHWM")
        loads = _metric(srv, "inferd_model_loads_on_demand_total")
        evictions = _metric(srv, "inferd_model_evictions_total")
    log = srv.log_path.read_text()  # once stopped, and whole (log() is its tail)
    shutil.rmtree(repo)  # 960 MiB of ONNX files: pytest keeps its last temporary folders

    assert not failures, failures[:5]
    assert requests_done and evictions > 0 and loads > HOLDS
    assert peak <= base + BUDGET + MARGIN, (peak / MB, base / MB, BUDGET / MB, MARGIN / MB)
    # every eviction logged that its model had nothing in flight, queued or waiting
    evicted = re.findall(r"model '(m\d+)' evicted \(idle [\d.]+ s, (\d+) requests in flight or queued", log)
    assert len(evicted) == evictions and all(n == "0" for _, n in evicted), evicted[:5]
    # each footprint is what its model holds (the first ONNX load's adds onnxruntime's runtime):
    # none counts memory that loads and evictions beside its own freed or took
    footprints: dict[str, float] = {}
    for name, mib in re.findall(r"model '(m\d+)' loaded on demand in [\d.]+ s \(footprint ([\d.]+) MiB", log):
        footprints[name] = max(footprints.get(name, 0.0), float(mib))
    swollen = {name: mib for name, mib in footprints.items() if mib > 1.5 * SIZE}
    assert len(swollen) <= 1, swollen
    # a request is cold when a load of its model ended while it waited (it waited for that load)
    loaded = _loads(log)
    assert len(loaded) == loads, (len(loaded), loads)
    ends: dict[str, list[float]] = {}
    for name, end, _ in loaded:
        ends.setdefault(name, []).append(end)
    lines = [
        f"\n{len(requests_done)} requests over {CLIENTS // 2} HTTP + {CLIENTS // 2} gRPC clients in {SECONDS:g} s, "
        f"{int(loads)} loads on demand, {int(evictions)} evictions, hit rate {1 - loads / len(requests_done):.1%}; "
        f"peak RSS {peak / MB:.0f} MiB <= base {base / MB:.0f} + budget {BUDGET / MB:.0f} + margin {MARGIN / MB:.0f}"
    ]
    for backend in ("onnx", "python"):
        mine = [r for r in requests_done if _backend(int(r[0][1:])) == backend]
        cold = [took for name, start, end, took in mine if any(start <= e <= end for e in ends.get(name, ()))]
        warm = [took for name, start, end, took in mine if not any(start <= e <= end for e in ends.get(name, ()))]
        load = [took for name, _, took in loaded if _backend(int(name[1:])) == backend]
        lines.append(
            f"{backend:>6}: {len(warm)} warm p50 {_ms(warm, 50)} / p99 {_ms(warm, 99)} ms; {len(cold)} cold "
            f"p50 {_ms(cold, 50)} / p99 {_ms(cold, 99)} ms; {len(load)} loads p50 {_ms(load, 50)} / p99 {_ms(load, 99)} ms"
        )
    print("\n".join(lines))
