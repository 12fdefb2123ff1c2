"""Custom metrics from model code (``pb_utils.MetricFamily``) on a real ``inferd serve``'s ``/metrics``.

The exposition lines and the error sentences were taken from Triton 2.51 running the same model
(its metrics port, scraped with curl): counters keep the family's name, labels are sorted, numbers
are written bare, a histogram writes ``_count``, ``_sum`` and then its buckets. The families go away
when the model unloads.
"""

from __future__ import annotations

import textwrap
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "INFO" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
# Records IN in a counter (two label sets), a gauge and a histogram; INFO: what the misuses raised.
MODEL_PY = source("python_backend_metrics")
# Creates a family whose name another model already uses with another kind: its load fails.
CONFLICT_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        pb_utils.MetricFamily("pyback_requests", "Requests seen", pb_utils.MetricFamily.GAUGE)

    def execute(self, requests):
        return []
"""


def _model(code: str) -> dict[str, str]:
    return {"config.pbtxt": textwrap.dedent(CONFIG), "1/model.py": textwrap.dedent(code)}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {"metrics_model": _model(MODEL_PY), "conflict": _model(CONFLICT_PY)}
    return serve(repo, "--model-control-mode=explicit", "--load-model=metrics_model")


def _scrape(server, accept: str = "") -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{server.metrics_port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read().decode()


def _family(text: str, name: str) -> list[str]:
    """The lines of one family: its HELP and TYPE lines, then its samples (label sets sorted, as the
    order of a family's series is not Triton's contract; a histogram's own order is kept)."""
    samples = tuple(f"{name}{suffix}{end}" for suffix in ("", "_count", "_sum", "_bucket") for end in ("{", " "))
    lines = [line for line in text.splitlines() if line.startswith((f"# HELP {name} ", f"# TYPE {name} ", *samples))]
    head, rest = lines[:2], lines[2:]
    return head + (rest if any("_bucket" in line for line in rest) else sorted(rest))


def _infer(server, value: float, protocol: str) -> list[str]:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    x = module.InferInput("IN", [1], "FP32")
    x.set_data_from_numpy(np.array([value], np.float32))
    return [s.decode() for s in client.infer("metrics_model", [x]).as_numpy("INFO")]


def test_families_are_exported_as_triton_writes_them_and_go_away_on_unload(server):
    first = _infer(server, 2.0, "http")
    second = _infer(server, 7.0, "grpc")
    assert first[-2:] == ["counter=2.0", "gauge=2.0"] and second[-2:] == ["counter=9.0", "gauge=7.0"]
    text = _scrape(server)
    assert _family(text, "pyback_requests") == [
        "# HELP pyback_requests Requests seen",
        "# TYPE pyback_requests counter",
        'pyback_requests{kind="a",model="metrics_model"} 9',
        'pyback_requests{kind="b",model="metrics_model"} 2',
    ]
    assert _family(text, "pyback_last_value") == [
        "# HELP pyback_last_value Last value",
        "# TYPE pyback_last_value gauge",
        'pyback_last_value{model="metrics_model"} 7',
    ]
    assert _family(text, "pyback_value_hist") == [
        "# HELP pyback_value_hist Values",
        "# TYPE pyback_value_hist histogram",
        'pyback_value_hist_count{model="metrics_model"} 2',
        'pyback_value_hist_sum{model="metrics_model"} 9',
        'pyback_value_hist_bucket{model="metrics_model",le="1"} 0',
        'pyback_value_hist_bucket{model="metrics_model",le="5"} 1',
        'pyback_value_hist_bucket{model="metrics_model",le="10"} 2',
        'pyback_value_hist_bucket{model="metrics_model",le="+Inf"} 2',
    ]
    openmetrics = _scrape(server, "application/openmetrics-text; version=1.0.0")
    assert 'pyback_requests{kind="a",model="metrics_model"} 9.0' in openmetrics
    assert 'pyback_value_hist_bucket{le="5",model="metrics_model"} 1.0' in openmetrics
    client = httpclient.InferenceServerClient(server.http_url)
    client.unload_model("metrics_model")
    try:
        assert "pyback_" not in _scrape(server)
    finally:
        client.load_model("metrics_model")
    assert 'pyback_requests{kind="a",model="metrics_model"} 0' in _scrape(server)  # a fresh load starts at 0
    assert _infer(server, 1.0, "http")[-2:] == ["counter=1.0", "gauge=1.0"]


def test_misuse_raises_tritons_sentences(server):
    info = dict(line.split(": ", 1) for line in _infer(server, 0.0, "http")[:-2])
    assert info["same family again"] == "ok"
    assert info["histogram without buckets"] == "Failed to create metric. Missing required buckets."
    expected = {
        "set a counter": ("Failed to set metric value: ", "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"),
        "negative counter": (
            "Failed to increment metric value: ",
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values.",
        ),
        "observe a gauge": (
            "Failed to observe metric value: ",
            "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
        ),
        "increment a histogram": (
            "Failed to increment metric value: ",
            "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment",
        ),
        "value of a histogram": (
            "Failed to get metric value: ",
            "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
        ),
    }
    for attempt, (head, tail) in expected.items():
        assert info[attempt].startswith(head) and info[attempt].endswith(tail), (attempt, info[attempt])
    assert (
        info["same family, other kind"].startswith("Error when creating MetricFamily: ")
        and "Family name already exists with different type" in info["same family, other kind"]
    )


def test_a_model_redefining_a_family_fails_to_load_and_the_server_stays_up(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as err:
        client.load_model("conflict")
    message = str(err.value)
    assert message.startswith("[400] ") and "'conflict'" in message
    assert "Error when creating MetricFamily: " in message
    assert "Family name already exists with different type" in message
    assert client.is_server_live() and client.is_model_ready("metrics_model")


# Counts its requests in a counter and a histogram; PID: the worker that ran the request.
WORKER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""
WORKER_PY = source("python_backend_metrics_worker")


def test_with_workers_counters_and_histograms_are_summed_over_the_workers(tmp_path):
    repo = write_repository(tmp_path / "models", {"counted": {"config.pbtxt": WORKER_CONFIG, "1/model.py": WORKER_PY}})
    with ServerProcess([repo], ["--workers", "2"]) as srv:
        pids = []
        for i in range(16):  # a new connection each time: the kernel spreads them over the workers
            client = httpclient.InferenceServerClient(srv.http_url)
            x = httpclient.InferInput("IN", [1], "FP32")
            x.set_data_from_numpy(np.array([i % 2 * 5.0], np.float32))
            pids.append(int(client.infer("counted", [x]).as_numpy("PID")[0]))
            client.close()
        assert len(set(pids)) == 2, pids
        text = _scrape(srv)
    assert _family(text, "pyback_worker_requests")[2:] == ["pyback_worker_requests 16"]
    assert _family(text, "pyback_worker_sizes")[2:] == [
        "pyback_worker_sizes_count 16",
        "pyback_worker_sizes_sum 40",
        'pyback_worker_sizes_bucket{le="1"} 8',
        'pyback_worker_sizes_bucket{le="+Inf"} 16',
    ]
    [gauge] = _family(text, "pyback_worker_last")[2:]
    assert int(gauge.split()[1]) in set(pids)  # a gauge is the answering worker's
