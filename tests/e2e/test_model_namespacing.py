"""``--model-namespacing``: the same model names in two repositories, end to end (HTTP and gRPC).

Two repositories each hold a model ``m`` (adding 1 in ``a``, 2 in ``b``), an ensemble ``e`` and an
ensemble ``ens_<repo>`` calling ``m``, and a model of their own; ``a`` also holds ``cross``, an
ensemble calling ``only_b`` (found only in ``b``). Every expected answer below was checked against
tritonserver 2.51 (CPU, Python backend) started with the same repositories and
``--model-namespacing=true``, except where a comment says how and why inferd differs.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.testing import ServerProcess, write_repository
from tests.http_calls import json_call
from tests.servers import Servers
from tests.triton_clients import error_of

ADD = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + np.float32({add}))])
            for r in requests]
"""
IO = """max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def _plain(add: int) -> dict[str, str]:
    return {"config.pbtxt": 'backend: "python"\n' + IO, "1/model.py": ADD.format(add=add)}


def _ensemble(step: str) -> dict[str, str]:
    return {
        "config.pbtxt": 'platform: "ensemble"\n'
        + IO
        + f"""ensemble_scheduling {{ step [ {{ model_name: "{step}"
  model_version: -1 input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} }} ] }}
""",
        "1/.keep": "",
    }


AMBIGUOUS = (
    "There are 2 identifiers of model '{}' in global map, model namespace must be provided to resolve ambiguity."
)
#: Triton 2.51's index: every model of repository a, then of b, each by name; a name in both has a row in each.
INDEX = ["cross", "e", "ens_a", "m", "only_a", "e", "ens_b", "m", "only_b"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("namespacing")
    repos = []
    for repo, add in (("a", 1), ("b", 2)):
        models = {
            "m": _plain(add),
            "e": _ensemble("m"),
            f"ens_{repo}": _ensemble("m"),
            f"only_{repo}": _plain(add * 10),
        }
        if repo == "a":
            models["cross"] = _ensemble("only_b")
        repos.append(write_repository(root / repo, models))
    # explicit mode with every model loaded at start-up (what mode none loads), so loads and unloads can be asked
    return serve(repos, "--model-namespacing=true", "--model-control-mode=explicit", "--load-model=*")


def _http(server: ServerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return json_call(f"http://{server.http_url}{path}", method, body)


def _infer(server: ServerProcess, name: str) -> tuple[int, Any]:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
    status, out = _http(server, "POST", f"/v2/models/{name}/infer", body)
    return status, out["outputs"][0]["data"] if status == 200 else out


def _index(server: ServerProcess) -> list[tuple[str, str, str]]:
    _, rows = _http(server, "POST", "/v2/repository/index", {})
    return [(r["name"], r.get("state", ""), r.get("reason", "")) for r in rows]


@pytest.fixture(scope="module")
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def test_every_model_of_both_repositories_loads_and_is_listed(server):
    assert _index(server) == [(name, "READY", "") for name in INDEX]


def test_each_ensemble_calls_its_own_repositorys_model(server, grpc):
    assert _infer(server, "ens_a") == (200, [2.0, 3.0])  # a's m adds 1
    assert _infer(server, "ens_b") == (200, [3.0, 4.0])  # b's m adds 2
    assert _infer(server, "cross") == (200, [21.0, 22.0])  # not in a: the only one, b's
    assert _infer(server, "only_a") == (200, [11.0, 12.0])
    inp = grpcclient.InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(np.array([1, 2], np.float32))
    assert grpc.infer("ens_b", [inp]).as_numpy("OUTPUT0").tolist() == [3.0, 4.0]
    assert grpc.infer("only_b", [inp]).as_numpy("OUTPUT0").tolist() == [21.0, 22.0]
    assert grpc.is_model_ready("only_b") and grpc.get_model_metadata("only_b").name == "only_b"


@pytest.mark.parametrize("name", ["m", "e"])
def test_a_name_in_both_repositories_is_refused_with_tritons_sentence(server, grpc, name):
    sentence = AMBIGUOUS.format(name)
    assert _infer(server, name) == (400, {"error": sentence})
    assert _http(server, "GET", f"/v2/models/{name}") == (400, {"error": sentence})
    assert _http(server, "GET", f"/v2/models/{name}/config") == (400, {"error": sentence})
    assert _http(server, "GET", f"/v2/models/{name}/ready") == (400, {"error": "Model version not ready"})
    not_available = {"error": f"requested model '{name}' is not available"}
    assert _http(server, "GET", f"/v2/models/{name}/stats") == (400, not_available)
    assert _http(server, "GET", f"/v2/models/{name}/versions/1/stats") == (400, not_available)
    assert _http(server, "GET", f"/v2/models/{name}/trace/setting") == (
        400,
        {"error": f"Request for unknown model : {name}"},
    )

    inp = grpcclient.InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(np.array([1, 2], np.float32))
    invalid = ("StatusCode.INVALID_ARGUMENT", sentence)
    assert error_of(lambda: grpc.infer(name, [inp])) == invalid
    assert error_of(lambda: grpc.get_model_metadata(name)) == invalid
    assert error_of(lambda: grpc.get_model_config(name)) == invalid
    assert grpc.is_model_ready(name) is False
    assert error_of(lambda: grpc.get_inference_statistics(name)) == (
        "StatusCode.INVALID_ARGUMENT", f"requested model '{name}' is not available")  # fmt: skip


def test_an_unknown_name_is_answered_as_without_the_flag(server):
    # Triton 2.51 answers 400 here once the flag is on (its lookup's INVALID_ARG); inferd keeps
    # the 404 it answers without the flag, so the flag changes nothing for names held once or not at all.
    assert _infer(server, "nope") == (404, {"error": "Request for unknown model: 'nope' is not found"})


def test_statistics_of_every_model_list_both_repositories(server, grpc):
    # Triton 2.51 fails this call once the flag is on ("Request for unknown model:
    # '<repository>::cross' is not found"); inferd lists every version, by repository as the index does.
    status, body = _http(server, "GET", "/v2/models/stats")
    assert status == 200 and [s["name"] for s in body["model_stats"]] == INDEX
    assert [s.name for s in grpc.get_inference_statistics().model_stats] == INDEX


def _series(server: ServerProcess, family: str) -> dict[str, float]:
    """The samples of ``family`` on ``/metrics``, by their label text (``model="m",namespace=...``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=60) as r:
        text = r.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(rf"^{family}{{(.*)}} (\S+)$", text, re.M)}


def _m_successes(server: ServerProcess) -> tuple[float, float]:
    """``nv_inference_request_success`` of ``m`` in repository a and in b: two series, told apart by
    Triton's ``namespace`` label, the repository as given to ``--model-repository``."""
    series = _series(server, "nv_inference_request_success")
    a, b = (series[f'model="m",namespace="{repo}",version="1"'] for repo in server.repositories)
    return a, b


def _wait_for(server: ServerProcess, expected: tuple[float, float]) -> None:
    deadline = time.monotonic() + 30
    while _m_successes(server) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _m_successes(server) == expected


def test_metrics_label_each_series_with_its_repository(server):
    # As Triton 2.51 with the flag: every per-model series has namespace="<the --model-repository
    # value>", labels in prometheus-cpp's order (model, namespace[, reason], version).
    before = _m_successes(server)
    assert _infer(server, "ens_a") == (200, [2.0, 3.0])
    for _ in range(3):
        assert _infer(server, "ens_b") == (200, [3.0, 4.0])
    _wait_for(server, (before[0] + 1, before[1] + 3))
    a, b = server.repositories
    failures = _series(server, "nv_inference_request_failure")
    assert f'model="m",namespace="{b}",reason="BACKEND",version="1"' in failures
    assert f'model="only_a",namespace="{a}",reason="OTHER",version="1"' in failures
    labels = set(_series(server, "nv_inference_count")) | set(_series(server, "nv_inference_exec_count"))
    in_a = INDEX.index("only_a") + 1  # INDEX: a's models, then b's
    assert labels == {f'model="{name}",namespace="{a if i < in_a else b}",version="1"' for i, name in enumerate(INDEX)}


def test_workers_sum_each_repositorys_series_apart(tmp_path):
    # --workers 2: every scrape (whichever worker answers) sums both workers' counts, per repository.
    repos = [write_repository(tmp_path / repo, {"m": _plain(add), f"ens_{repo}": _ensemble("m")})
             for repo, add in (("a", 1), ("b", 2))]  # fmt: skip
    with ServerProcess(repos, ["--model-namespacing=true", "--workers", "2"]) as srv:
        for _ in range(4):  # a new connection each: the kernel deals them out to the workers
            assert _infer(srv, "ens_a") == (200, [2.0, 3.0])
        for _ in range(6):
            assert _infer(srv, "ens_b") == (200, [3.0, 4.0])
        _wait_for(srv, (4.0, 6.0))
        for _ in range(6):
            assert _m_successes(srv) == (4.0, 6.0)


def test_unload_and_load_by_name_act_on_both_repositories(server):
    # Last: it leaves the ensembles unloaded. As in Triton 2.51, unloading 'm' unloads both
    # (and the ensembles calling them), loading 'm' loads both, and the name stays ambiguous.
    assert _http(server, "POST", "/v2/repository/models/m/unload", {}) == (200, None)
    after = dict(zip(range(len(INDEX)), _index(server), strict=True))
    assert [after[i][:2] for i in (3, 7)] == [("m", "UNAVAILABLE")] * 2
    assert {after[i][1] for i in (1, 2, 5, 6)} == {"UNAVAILABLE"}  # e and ens_* of both
    assert after[2][2] == "unloaded: it calls 'm', which was unloaded"  # inferd's reason (Triton: "unloaded")
    assert _infer(server, "cross") == (200, [21.0, 22.0])
    assert _http(server, "POST", "/v2/repository/models/m/load", {}) == (200, None)
    assert [row[:2] for row in _index(server) if row[0] == "m"] == [("m", "READY")] * 2
    assert _infer(server, "m") == (400, {"error": AMBIGUOUS.format("m")})
    assert _http(server, "POST", "/v2/repository/models/ens_b/load", {}) == (200, None)
    assert _infer(server, "ens_b") == (200, [3.0, 4.0])
