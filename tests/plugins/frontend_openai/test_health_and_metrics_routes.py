"""``/health`` and ``/metrics`` on the OpenAI port, where KServe's LLMInferenceService probes a model
server and where the endpoint picker and production-stack scrape it: ``/health`` is 200 when the
server is ready and 503 once it drains; ``/metrics`` is the metrics port's scrape (the routing
view with ``--routing-metrics``), and 404 on a server without the metrics frontend."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from inferd.testing import ServerProcess
from tests.router_rules import families, picker_value
from tests.waiting import wait_for

from .chat_model import write_chat_model
from .conftest import OpenAIServer


def _root(server: OpenAIServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def test_health_is_200_when_ready_without_a_body(openai_server: OpenAIServer) -> None:
    response = httpx.get(f"{_root(openai_server)}/health", timeout=10)
    assert (response.status_code, response.content) == (200, b"")
    assert httpx.post(f"{_root(openai_server)}/health", timeout=10).status_code == 405


def test_metrics_on_the_openai_port_are_the_metrics_ports(openai_server: OpenAIServer) -> None:
    here = httpx.get(f"{_root(openai_server)}/metrics", timeout=10)
    there = httpx.get(f"http://127.0.0.1:{openai_server.process.metrics_port}/metrics", timeout=10)
    assert here.status_code == 200 and here.headers["content-type"] == there.headers["content-type"]
    assert set(families(here.text)) == set(families(there.text))
    openmetrics = httpx.get(
        f"{_root(openai_server)}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert openmetrics.text.endswith("# EOF\n")


def test_routing_view_and_drain(tmp_path: Path) -> None:
    write_chat_model(tmp_path / "models", "chat")
    flags = ["--openai-port", "0", "--openai-address", "127.0.0.1", "--routing-metrics=true", "--drain-delay-secs=5"]
    with ServerProcess([tmp_path / "models"], flags) as process:
        root = f"http://127.0.0.1:{process.ports['openai']}"
        text = httpx.get(f"{root}/metrics", timeout=10).text
        assert families(text)["nv_inference_pending_request_count"][0].labels == {}
        assert picker_value(text, "nv_inference_pending_request_count") == 0
        assert httpx.get(f"{root}/health", timeout=10).status_code == 200
        process.proc.send_signal(signal.SIGTERM)  # draining: still serving, no longer ready
        started = time.monotonic()
        wait_for(lambda: httpx.get(f"{root}/health", timeout=10).status_code == 503, timeout=4, what="503")
        assert time.monotonic() - started < 5


def test_no_metrics_frontend_no_metrics_route(tmp_path: Path) -> None:
    write_chat_model(tmp_path / "models", "chat")
    flags = ["--openai-port", "0", "--openai-address", "127.0.0.1", "--allow-metrics=false"]
    with ServerProcess([tmp_path / "models"], flags) as process:
        response = httpx.get(f"http://127.0.0.1:{process.ports['openai']}/metrics", timeout=10)
        assert response.status_code == 404
        assert "without its metrics frontend" in response.json()["error"]["message"]
