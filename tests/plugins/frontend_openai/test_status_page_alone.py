"""The status page on the OpenAI port when it is the only port serving HTTP (``--allow-http=false``):
``GET /`` is the HTTP port's page, ``GET /v2/status`` its JSON, admitted as the HTTP port admits
them (``--http-restricted-api`` naming the model-repository group), and the start-up summary points
there. With the HTTP port on, the OpenAI port serves no page (the HTTP port has it)."""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models

ADMIN = {"admin": "s3cret"}


class OpenAIOnly(ServerProcess):
    """A server without the HTTP port: live once the summary is logged (the ports file is written
    when every frontend listens; the summary once the start-up loads are done)."""

    def wait_live(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while "] serving:" not in self.log():
            assert self.proc is not None and self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 120.0) -> None:
        self.wait_live(timeout)


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        conn.close()


def test_the_openai_port_alone_serves_the_status_page(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "perf.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    args = ["--allow-http=false", "--openai-port", "0", "--http-restricted-api=model-repository:admin=s3cret",
            "--status-plots-dir", str(plots)]  # fmt: skip
    with OpenAIOnly([repo], args) as server:
        port = server.ports["openai"]
        assert "http" not in server.ports
        block = server.log()[server.log().index("serving:\n") :]
        assert re.search(rf"\n  status page \.+ http://127\.0\.0\.1:{port}/\n", block), block

        code, content_type, body = get(port, "/", ADMIN)
        assert (code, content_type) == (200, "text/html; charset=utf-8")
        assert b"<title>inferd status</title>" in body
        code, content_type, body = get(port, "/v2/status", ADMIN)
        assert (code, content_type) == (200, "application/json"), body
        status = json.loads(body)
        assert [(m["name"], m["version"], m["state"]) for m in status["models"]] == [("add_sub", "1", "READY")]
        assert status["server"]["name"] == "inferd" and status["usage"] is None
        assert [p["url"] for p in status["plots"]] == ["v2/status/plots/perf.svg"]
        code, content_type, body = get(port, "/v2/status/plots/perf.svg", ADMIN)
        assert (code, content_type, body) == (200, "image/svg+xml", (plots / "perf.svg").read_bytes())
        code, _, body = get(port, "/v2/status/plots/nope.svg", ADMIN)
        assert code == 404 and "no plot 'nope.svg'" in json.loads(body)["error"]["message"]

        # restricted as on the HTTP port: without the group's header, refused (OpenAI's error shape)
        for path in ("/", "/v2/status", "/v2/status/plots/perf.svg"):
            code, _, body = get(port, path)
            assert code == 403, (path, body)
            error = json.loads(body)["error"]
            assert "This API is restricted, expecting header 'admin'" in error["message"]
        # the OpenAI routes are still there
        code, _, body = get(port, "/v1/models", ADMIN)
        assert code == 200, body


def test_with_the_http_port_on_the_openai_port_serves_no_page(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    with ServerProcess([repo], ["--openai-port", "0"]) as server:
        port = server.ports["openai"]
        assert get(port, "/")[0] == 404 and get(port, "/v2/status")[0] == 404
        assert get(server.http_port, "/")[0] == 200
        block = server.log()[server.log().index("serving:\n") :]
        assert f"status page ............ http://127.0.0.1:{server.http_port}/\n" in block
