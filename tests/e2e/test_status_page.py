"""The status page (``GET /``) and its JSON (``GET /v2/status``) over a real socket: what they show of
the whole server (``--workers 2``: the statistics of both workers), and who may see it (the
model-repository group, as the repository index; the live figures only with the statistics group)."""

from __future__ import annotations

import hashlib
import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models

BROKEN_PY = "raise RuntimeError('cannot import this model')\n"
SPLIT_CONFIG = models.ADD_SUB_CONFIG + (
    'version_policy: { all: {} }\nparameters { key: "traffic_split" value: { string_value: "1:75,2:25" } }\n'
)
RESTRICTED = "This API is restricted, expecting header '{}'"


def send(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, str, bytes]:
    """One request on a connection of its own (``--workers 2``: the kernel spreads them): status,
    content type, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
        response = conn.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        conn.close()


def status_of(port: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    code, content_type, body = send(port, "GET", "/v2/status", headers)
    assert (code, content_type) == (200, "application/json"), body
    return json.loads(body)


def infer(port: int, model: str, headers: dict[str, str] | None = None) -> None:
    inputs = [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]
    code, _, body = send(port, "POST", f"/v2/models/{model}/infer", headers, {"inputs": inputs})
    assert code == 200, body


def rows(status: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    return {(m["name"], m.get("version", "")): m for m in status["models"]}


def wait_for_rows(
    port: int, wanted: dict[tuple[str, str], str], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The status once each (model, version) of ``wanted`` has its state (the poller loads them)."""
    deadline = time.monotonic() + 60
    while True:
        status = status_of(port, headers)
        shown = rows(status)
        if all(shown.get(key, {}).get("state") == state for key, state in wanted.items()):
            return status
        assert time.monotonic() < deadline, status["models"]
        time.sleep(0.2)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = write_repository(
        tmp_path_factory.mktemp("status") / "models",
        {"add_sub": models.add_sub(versions=(1, 2), config=SPLIT_CONFIG),
         "broken": {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": BROKEN_PY}},
    )  # fmt: skip
    args = ["--model-control-mode=poll", "--repository-poll-secs=1", "--workers=2", "--exit-on-error=false"]
    with ServerProcess([repo], args).start(wait_ready=False) as proc:
        wait_for_rows(proc.http_port, {("add_sub", "1"): "READY", ("add_sub", "2"): "READY"})
        yield proc


def test_the_page_is_one_self_contained_html_file(server):
    code, content_type, body = send(server.http_port, "GET", "/")
    assert (code, content_type) == (200, "text/html; charset=utf-8")
    page = body.decode()
    assert "<title>inferd status</title>" in page and 'fetch("v2/status"' in page
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page


def test_the_status_shows_states_reasons_traffic_and_the_whole_servers_figures(server):
    for _ in range(8):  # a connection each: both workers take some
        infer(server.http_port, "add_sub")
    status = status_of(server.http_port)
    assert status["server"]["name"] == "inferd" and status["usage"] is None
    shown = rows(status)
    assert shown[("add_sub", "1")]["state"] == shown[("add_sub", "2")]["state"] == "READY"
    assert shown[("add_sub", "1")]["traffic"] == "stable (weight 75)"
    assert shown[("broken", "1")]["state"] == "UNAVAILABLE"
    assert "cannot import this model" in shown[("broken", "1")]["reason"]
    split = status["traffic"]["add_sub"]
    assert split["weights"] == {"1": 75, "2": 25} and split["versions"]["2"]["state"] == "canary"
    figures = {s["version"]: s for s in status["statistics"] if s["name"] == "add_sub"}
    assert sum(s["inference_count"] for s in figures.values()) == 8
    success = [s["inference_stats"]["success"] for s in figures.values()]
    assert sum(d["count"] for d in success) == 8 and all(d["ns"] > 0 for d in success if d["count"])


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Restricted model-repository and statistics groups, and API keys: ``ops`` sees the add_*
    models and may not read statistics; ``viewer`` sees every model and may; ``user`` may not use
    the model-repository group."""
    root = tmp_path_factory.mktemp("status-guarded")
    repo = write_repository(
        root / "models",
        {"add_sub": models.add_sub(), "broken": {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": BROKEN_PY}},
    )
    tenants = {
        "ops": {"keys": [sha("ops-key")], "models": ["add_*"], "apis": ["health", "inference", "model-repository"]},
        "viewer": {"keys": [sha("viewer-key")], "apis": ["health", "model-repository", "statistics"]},
        "user": {"keys": [sha("user-key")]},
    }
    (root / "auth.json").write_text(json.dumps({"tenants": tenants}))
    args = ["--model-control-mode=poll", "--exit-on-error=false", f"--auth-config={root / 'auth.json'}",
            "--http-restricted-api=model-repository:admin-key=yes", "--http-restricted-api=statistics:stats-key=yes"]  # fmt: skip
    with ServerProcess([repo], args).start(wait_ready=False) as proc:
        yield proc


def headers(key: str, *secrets: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **dict.fromkeys(secrets, "yes")}


@pytest.mark.parametrize("path", ["/", "/v2/status"])
def test_the_page_and_its_json_are_refused_as_the_repository_index_is(guarded, path):
    port = guarded.http_port
    for given in ({}, {"authorization": "Bearer viewer-key"}):
        code, _, body = send(port, "GET", path, given)
        assert (code, json.loads(body)) == (403, {"error": RESTRICTED.format("admin-key")})
        assert send(port, "POST", "/v2/repository/index", given)[:1] == (403,)
    code, _, body = send(port, "GET", path, {"admin-key": "yes"})
    assert code == 401 and "missing API key" in json.loads(body)["error"]
    code, _, body = send(port, "GET", path, headers("user-key", "admin-key"))
    assert (code, json.loads(body)) == (403, {"error": "tenant 'user' may not use the model-repository API"})
    assert send(port, "GET", path, headers("ops-key", "admin-key"))[0] == 200


def test_a_tenant_sees_its_models_its_usage_and_figures_only_with_the_statistics_group(guarded):
    port = guarded.http_port
    wait_for_rows(port, {("add_sub", "1"): "READY"}, headers("ops-key", "admin-key"))
    infer(port, "add_sub", headers("ops-key"))
    ops = status_of(port, headers("ops-key", "admin-key"))
    assert [m["name"] for m in ops["models"]] == ["add_sub"]  # not "broken": outside its patterns
    assert ops["statistics"] is None  # ops may not use the statistics API
    assert ops["usage"]["tenants"]["ops"]["models"]["add_sub"]["success_requests"] == 1
    viewer = status_of(port, headers("viewer-key", "admin-key"))
    assert {m["name"] for m in viewer["models"]} == {"add_sub", "broken"}
    assert viewer["statistics"] is None  # without the statistics group's header
    viewer = status_of(port, headers("viewer-key", "admin-key", "stats-key"))
    assert [(s["name"], s["inference_count"]) for s in viewer["statistics"]] == [("add_sub", 1)]
