"""Load on demand through every path a request takes besides plain HTTP/gRPC infer: an ensemble
loads its steps (and a step of an ensemble in use is never evicted), a Python model calling a model
(BLS) loads it, the OpenAI API loads its model, and under poll a model changed on disk while evicted
loads its new files on its next request; a tenant's request loads only models the tenant may see."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.plugins.frontend_openai.chat_model import write_chat_model
from tests.python_models import source
from tests.triton_clients import repository_index

MB = 1 << 20

ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [{ name: "MS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "ID" data_type: TYPE_INT64 dims: [1] }]
ensemble_scheduling { step [{ model_name: "STEP" model_version: -1
  input_map { key: "MS" value: "MS" } output_map { key: "ID" value: "ID" } }] }
"""


def hog(ident: int, megabytes: int) -> dict[str, str]:
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(megabytes)).replace("IDENT", str(ident))
    return {"config.pbtxt": config, "1/model.py": source("memory_hog")}


def call(url: str, model: str, ms: int = 0) -> int:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    x = httpclient.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.array([ms], dtype=np.int32))
    return int(client.infer(model, [x]).as_numpy("ID")[0])


def states(srv: ServerProcess) -> dict[str, str]:
    index = repository_index(httpclient.InferenceServerClient(srv.http_url))
    return {name: state for (name, _), (state, _) in index.items()}


def test_an_ensemble_loads_its_steps_and_a_step_in_use_is_never_evicted(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "models",
        {
            "step": hog(5, 40),
            "ens": {"config.pbtxt": ENSEMBLE.replace("STEP", "step"), "1/.keep": ""},
            "other": hog(6, 40),
            "third": hog(7, 40),
        },
    )
    flags = ["--model-load-on-demand=true", f"--model-memory-budget={int(2.5 * 40 * MB)}"]
    with ServerProcess([repo], flags) as srv:
        assert call(srv.http_url, "ens") == 5  # the ensemble's load loads its step
        assert states(srv)["step"] == "READY" and states(srv)["ens"] == "READY"
        slow: list[int] = []
        worker = threading.Thread(target=lambda: slow.append(call(srv.http_url, "ens", 4000)))
        worker.start()
        time.sleep(0.5)
        assert call(srv.http_url, "other") == 6  # fits beside the step
        # no room for a third: the only idle model is 'other' (the step serves the ensemble in use)
        assert call(srv.http_url, "third") == 7
        now = states(srv)
        assert now["step"] == "READY" and now["ens"] == "READY" and now["other"] == "EVICTED", now
        worker.join()
        assert slow == [5]
        # once the ensemble is idle and the least recently used, making room evicts it with its step
        assert call(srv.http_url, "third") == 7
        assert call(srv.http_url, "other") == 6
        now = states(srv)
        assert now["step"] == "EVICTED" and now["ens"] == "EVICTED" and now["third"] == "READY", now
        assert call(srv.http_url, "ens") == 5  # and the next request loads both again


def test_a_python_model_calling_a_model_loads_it(tmp_path: Path) -> None:
    caller = source("memory_hog_caller", "config.pbtxt").replace("CALLEE", "callee")
    repo = write_repository(
        tmp_path / "models",
        {"caller": {"config.pbtxt": caller, "1/model.py": source("memory_hog_caller")}, "callee": hog(42, 1)},
    )
    with ServerProcess([repo], ["--model-load-on-demand=true"]) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        x = grpcclient.InferInput("MS", [1], "INT32")
        x.set_data_from_numpy(np.array([0], dtype=np.int32))
        assert int(client.infer("caller", [x]).as_numpy("ID")[0]) == 1042
        assert states(srv) == {"caller": "READY", "callee": "READY"}


def test_the_openai_api_loads_its_model(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_chat_model(repo, "chat")
    with ServerProcess([repo], ["--model-load-on-demand=true", "--openai-port", "0"]) as srv:
        assert states(srv)["chat"] == ""
        body = json.dumps({"model": "chat", "prompt": "the quick brown fox", "max_tokens": 3}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{srv.ports['openai']}/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200
            assert json.loads(response.read())["choices"][0]["text"]
        assert states(srv)["chat"] == "READY"


def test_under_poll_a_model_changed_while_evicted_loads_its_new_files(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"a": hog(1, 40), "b": hog(2, 40)})
    flags = [
        "--model-control-mode=poll",
        "--repository-poll-secs=0.5",
        "--model-load-on-demand=true",
        f"--model-memory-budget={int(1.5 * 40 * MB)}",
    ]
    with ServerProcess([repo], flags) as srv:
        assert call(srv.http_url, "a") == 1
        assert call(srv.http_url, "b") == 2
        assert states(srv)["a"] == "EVICTED"
        config = repo / "a" / "config.pbtxt"
        config.write_text(config.read_text().replace('string_value: "1" }', 'string_value: "11" }'))
        time.sleep(1.5)  # a few scans: the change is seen, and nothing loads it yet
        assert states(srv)["a"] == "EVICTED"
        assert call(srv.http_url, "a") == 11  # its next request loads the new files


def test_a_tenant_loads_only_the_models_it_may_see(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"mine": hog(1, 1), "theirs": hog(2, 1)})
    auth = tmp_path / "auth.json"
    tenants = {
        "a": {"keys": [digest("a-key")], "models": ["mine"]},
        "admin": {"keys": [digest("admin-key")], "apis": ["health", "model-repository"]},
    }
    auth.write_text(json.dumps({"tenants": tenants}))
    with ServerProcess([repo], ["--model-load-on-demand=true", f"--auth-config={auth}"]) as srv:
        body = json.dumps({"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [0]}]}).encode()
        headers = {"Content-Type": "application/json", "Authorization": "Bearer a-key"}

        def post(model: str) -> tuple[int, dict[str, object]]:
            request = urllib.request.Request(f"http://{srv.http_url}/v2/models/{model}/infer", body, headers)
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, answer = post("theirs")
        assert status == 404 and "unknown model" in str(answer["error"]), answer
        status, answer = post("mine")
        assert status == 200 and answer["outputs"][0]["data"] == [1], answer  # type: ignore[index]
        index = requests_index(srv)
        assert index == {"mine": "READY", "theirs": ""}, index


def requests_index(srv: ServerProcess) -> dict[str, str]:
    """The repository index, as the tenant allowed the repository API sees it."""
    request = urllib.request.Request(
        f"http://{srv.http_url}/v2/repository/index", b"{}", {"Authorization": "Bearer admin-key"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        rows = json.loads(response.read())
    return {row["name"]: row.get("state", "") for row in rows}


def test_with_workers_each_loads_on_demand_under_its_share_of_the_budget(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {f"m{i}": hog(i, 20) for i in range(4)})
    flags = ["--workers", "2", "--model-load-on-demand=true", f"--model-memory-budget={int(2 * 2.5 * 20 * MB)}"]
    with ServerProcess([repo], flags) as srv:
        assert "memory budget 50.0 MiB per worker" in srv.log()
        for round_ in range(3):
            for i in range(4):  # a new client (connection) each time: the kernel deals them to both workers
                assert call(srv.http_url, f"m{i}") == i, (round_, i)


def test_a_model_that_fails_to_load_says_why_and_is_not_retried_at_once(tmp_path: Path) -> None:
    broken = {
        "config.pbtxt": hog(0, 1)["config.pbtxt"],
        "1/model.py": "raise RuntimeError('cannot import this model')\n",
    }
    repo = write_repository(tmp_path / "models", {"broken": broken, "fine": hog(3, 1)})
    with ServerProcess([repo], ["--model-load-on-demand=true"]) as srv:
        for _ in range(3):
            with pytest.raises(InferenceServerException) as failed:
                call(srv.http_url, "broken")
            assert "'broken'" in str(failed.value) and "load failed" in str(failed.value), failed.value
            assert "a request loads it again after 30 s" in str(failed.value)
        assert call(srv.http_url, "fine") == 3  # one broken model harms no other
        index = repository_index(httpclient.InferenceServerClient(srv.http_url))
        assert index[("broken", "1")][0] == "UNAVAILABLE" and "cannot import this model" in index[("broken", "1")][1]
    assert srv.log_path.read_text().count("model 'broken' version 1 failed to load") == 1
