"""The logging extension: settings over HTTP and gRPC in Triton 2.51's shapes, applied live.

Triton answers ``{"log_file", "log_info", "log_warning", "log_error", "log_verbose_level",
"log_format"}`` (booleans, an integer, strings) and refuses to move the log file over the network.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.host.logging_settings import REQUEST_ID, LevelFilter, LogSettings, TritonFormatter
from inferd.testing import ServerProcess, write_repository
from tests.servers import Servers

PICKY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT64 dims: [ -1 ] } ]
"""
PICKY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            pb_utils.Logger.log_info(f"picky saw {x.tolist()}")
            if (x < 0).any():
                raise ValueError("negative input")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out
"""
DEFAULT_LINE = re.compile(r"^[EWI]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] ")
ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [EWI] \d+ [\w.]+:\d+\] ")


def wait_for_text(path: Path, needle: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in {path}:\n{text[-3000:]}")


def infer(client: httpclient.InferenceServerClient, value: int, request_id: str) -> None:
    x = httpclient.InferInput("X", [2], "INT64")
    x.set_data_from_numpy(np.array([value, 1], dtype=np.int64))
    client.infer("picky", [x], request_id=request_id)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("logging")
    repo = write_repository(root / "models", {"picky": {"config.pbtxt": PICKY_CONFIG, "1/model.py": PICKY_PY}})
    srv = serve(repo, "--log-file", str(root / "server.log"))
    srv.log_file = root / "server.log"
    return srv


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def test_settings_shape_and_updates_over_http(server, client):
    assert client.get_log_settings() == {"log_file": str(server.log_file), "log_info": True, "log_warning": True,
                                         "log_error": True, "log_verbose_level": 0, "log_format": "default"}  # fmt: skip
    got = client.update_log_settings({"log_warning": False})
    assert got["log_warning"] is False and got["log_verbose_level"] == 0
    assert client.update_log_settings({"log_warning": True})["log_warning"] is True
    for bad, message in (({"log_format": "bad"}, "invalid argument for log_format, got: bad"),
                         ({"log_verbose_level": "2"}, "must be an integer"),
                         ({"log_info": "true"}, "must be a boolean"),
                         ({"log_file": "/tmp/elsewhere.log"}, "log file location can not be updated")):  # fmt: skip
        with pytest.raises(InferenceServerException, match=message):
            client.update_log_settings(bad)


def test_log_file_gets_lines_with_request_ids(server, client):
    text = wait_for_text(server.log_file, "inferd ready")
    assert all(
        DEFAULT_LINE.match(line) for line in text.splitlines() if line and not line.startswith((" ", "Traceback"))
    )
    client.update_log_settings({"log_verbose_level": 1})
    try:
        infer(client, 1, "req-good-1")
        with pytest.raises(InferenceServerException):
            infer(client, -1, "req-bad-2")
        text = wait_for_text(server.log_file, "[request id: req-bad-2]")
    finally:
        client.update_log_settings({"log_verbose_level": 0})
    lines = [ln for ln in text.splitlines() if "[request id: req-bad-2]" in ln]
    assert any("picky" in ln and "negative input" in ln for ln in lines)  # the data plane's line
    assert "[request id: req-good-1] picky saw [1, 1]" in text  # the model's own line


def test_iso8601_format_over_grpc(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        got = g.update_log_settings({"log_format": "ISO8601", "log_verbose_level": 1}, as_json=True)["settings"]
        assert got["log_format"] == {"string_param": "ISO8601"}
        assert got["log_verbose_level"] == {"uint32_param": 1}
        assert got["log_info"] == {"bool_param": True}
        x = grpcclient.InferInput("X", [1], "INT64")
        x.set_data_from_numpy(np.array([-5], dtype=np.int64))
        with pytest.raises(InferenceServerException):
            g.infer("picky", [x], request_id="grpc-iso-3")
        text = wait_for_text(server.log_file, "[request id: grpc-iso-3]")
        line = next(ln for ln in text.splitlines() if "[request id: grpc-iso-3]" in ln)
        assert ISO_LINE.match(line), line
        with pytest.raises(InferenceServerException, match="log_format"):
            g.update_log_settings({"log_format": "fancy"})
    finally:
        g.update_log_settings({"log_format": "default", "log_verbose_level": 0})
        g.close()


# -- units ---------------------------------------------------------------------------------------------


def _record(level: int, msg: str = "hello") -> logging.LogRecord:
    return logging.LogRecord("inferd.x", level, "/a/b/dataplane.py", 42, msg, None, None)


def test_level_filter_follows_settings():
    settings = LogSettings()
    f = LevelFilter(settings)
    assert [f.filter(_record(n)) for n in (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)] == [
        True, True, True, False]  # fmt: skip
    settings.log_info, settings.log_error, settings.log_verbose_level = False, False, 1
    assert [f.filter(_record(n)) for n in (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, 9)] == [
        False, True, False, True, False]  # fmt: skip
    settings.log_verbose_level = 2
    assert f.filter(_record(9))


def test_formatter_layouts_and_request_id():
    token = REQUEST_ID.set("abc")
    try:
        line = TritonFormatter("default").format(_record(logging.WARNING))
    finally:
        REQUEST_ID.reset(token)
    assert DEFAULT_LINE.match(line) and line.endswith("dataplane.py:42] [request id: abc] hello")
    iso = TritonFormatter("ISO8601").format(_record(logging.ERROR))
    assert ISO_LINE.match(iso) and iso.endswith("] hello")
