"""``--model-device-memory-budget``: models whose backend reports device memory
(``Model.memory_usage``, plugin API 1.2) are evicted, least recently used first, to make room on
the device a load will use; a model holding nothing there is left alone; a load that finds no room
there is refused with the reason, and nothing serving is harmed.

The models are served by a backend plugin installed as a distribution (tests/fixtures/device_plugin,
backend ``devicehog``): each answers its ``id`` and reports holding ``megabytes`` MiB on ``cuda:0``.
No GPU is needed: the server counts what backends report, as it would a real GPU backend's."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.plugin_site import env_with, install_into
from tests.python_models import source
from tests.triton_clients import repository_index

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "device_plugin"
GIB = 1 << 30

CONFIG = """
backend: "devicehog"
max_batch_size: 0
input [{ name: "MS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "ID" data_type: TYPE_INT64 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
parameters { key: "megabytes" value { string_value: "1024" } }
parameters { key: "id" value { string_value: "IDENT" } }
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The devicehog plugin installed (a real wheel install) into a directory on PYTHONPATH."""
    return install_into(tmp_path_factory.mktemp("site"), FIXTURE)


def _hog(ident: int, pin: bool = False) -> dict[str, str]:
    config = CONFIG.replace("IDENT", str(ident))
    if pin:
        config += 'parameters { key: "pin" value { string_value: "true" } }\n'
    return {"config.pbtxt": config, "1/model.hog": ""}


def _call(srv: ServerProcess, model: str, ms: int = 0, grpc: bool = False) -> int:
    module = grpcclient if grpc else httpclient
    x = module.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.array([ms], dtype=np.int32))
    if grpc:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        return int(client.infer(model, [x], client_timeout=60).as_numpy("ID")[0])
    return int(httpclient.InferenceServerClient(srv.http_url, network_timeout=60).infer(model, [x]).as_numpy("ID")[0])


def _samples(srv: ServerProcess, name: str) -> dict[str, float]:
    """Every sample of the family ``name`` on /metrics, by its labels as written."""
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return {labels: float(v) for labels, v in re.findall(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M)}


def _states(srv: ServerProcess) -> dict[str, str]:
    index = repository_index(httpclient.InferenceServerClient(srv.http_url))
    return {name: state for (name, _), (state, _) in index.items()}


def test_loads_evict_the_least_recently_used_models_holding_the_device(site: Path, tmp_path: Path) -> None:
    cpu = source("memory_hog", "config.pbtxt").replace("MEGABYTES", "1").replace("IDENT", "9")
    models = {f"g{i}": _hog(i) for i in range(4)}
    models["cpu"] = {"config.pbtxt": cpu, "1/model.py": source("memory_hog")}  # reports nothing on a device
    repo = write_repository(tmp_path / "models", models)
    flags = ["--workers", "1", "--model-load-on-demand=true", "--model-device-memory-budget", "cuda:0=2.5GiB"]
    with ServerProcess([repo], flags, env=env_with(site)) as srv:
        assert "device memory budget cuda:0 2.5 GiB" in srv.log()
        assert _call(srv, "cpu") == 9  # the least recently used model, but it holds nothing on cuda:0
        assert _call(srv, "g0") == 0
        assert _call(srv, "g1", grpc=True) == 1
        assert _call(srv, "g2") == 2  # a first load: its report, once loaded, passes the budget: g0 goes
        assert _call(srv, "g3", grpc=True) == 3  # g1 goes
        assert _states(srv) == {"cpu": "READY", "g0": "EVICTED", "g1": "EVICTED", "g2": "READY", "g3": "READY"}
        assert _call(srv, "g0") == 0  # its last report (1 GiB) is expected: g2 goes before it loads
        assert _states(srv) == {"cpu": "READY", "g0": "READY", "g1": "EVICTED", "g2": "EVICTED", "g3": "READY"}
        evictions = _samples(srv, "inferd_model_evictions_total")
        assert evictions == {'{model="g0"}': 1, '{model="g1"}': 1, '{model="g2"}': 1}, evictions
        on_device = _samples(srv, "inferd_model_device_footprint_bytes")
        assert on_device == {'{device="cuda:0",model="g0"}': GIB, '{device="cuda:0",model="g3"}': GIB}, on_device
        assert _samples(srv, "inferd_model_device_memory_budget_bytes") == {'{device="cuda:0"}': 2.5 * GIB}
        assert _samples(srv, "inferd_model_device_memory_budget_used_bytes") == {'{device="cuda:0"}': 2 * GIB}
        assert "model 'g2' loaded on demand" in srv.log() and "cuda:0 1.0 GiB" in srv.log()


def test_no_room_on_the_device_waits_then_refuses_and_harms_nothing(site: Path, tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"g0": _hog(0, pin=True), "g1": _hog(1), "g2": _hog(2)})
    flags = [
        "--workers", "1",
        "--model-load-on-demand=true",
        "--model-load-on-demand-timeout-secs=1.5",
        f"--model-device-memory-budget=cuda:0={int(2.5 * GIB)}",
    ]  # fmt: skip
    with ServerProcess([repo], flags, env=env_with(site)) as srv:
        assert _states(srv)["g0"] == "READY"  # pinned: loaded at start, never evicted
        assert _call(srv, "g1") == 1
        assert _call(srv, "g2") == 2  # g1 goes (g0 is pinned)
        slow: list[int] = []
        busy = threading.Thread(target=lambda: slow.append(_call(srv, "g2", ms=4000, grpc=True)))
        busy.start()
        time.sleep(0.5)
        body = {"inputs": [{"name": "MS", "shape": [1], "datatype": "INT32", "data": [0]}]}
        response = requests.post(f"http://{srv.http_url}/v2/models/g1/infer", json=body, timeout=30)
        assert response.status_code == 503, response.text
        message = response.json()["error"]
        assert "'g1'" in message and "cuda:0 1.0 GiB" in message and "--model-device-memory-budget" in message
        assert "g0" in message and "g2" in message and response.headers.get("retry-after")
        busy.join()
        assert slow == [2]  # the busy model's request finished, on the version it started on
        assert _states(srv) == {"g0": "READY", "g1": "EVICTED", "g2": "READY"}
        assert _call(srv, "g1") == 1  # g2 is idle now: it goes
        assert _states(srv) == {"g0": "READY", "g1": "READY", "g2": "EVICTED"}
        assert _samples(srv, "inferd_model_load_on_demand_refused_total") == {'{model="g1"}': 1}


def test_a_malformed_device_budget_stops_the_server_with_the_reason(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {})
    for flag, words in (
        ("cuda0=1G", "give DEVICE=SIZE"),
        ("cuda:0=lots", "give bytes"),
        ("cuda:0=150%", "at most 1"),
        ("cuda:0=0", "more than 0"),
    ):
        srv = ServerProcess([repo], ["--model-load-on-demand=true", f"--model-device-memory-budget={flag}"])
        with pytest.raises(RuntimeError, match="inferd exited") as info:
            srv.start(timeout=60)
        srv.stop()
        assert f"--model-device-memory-budget '{flag}'" in str(info.value) and words in str(info.value), info.value
