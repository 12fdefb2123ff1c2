"""``--log-format json`` (one JSON object per line) and the model load lines, against a real
``inferd serve``; Triton's own layouts (default, ISO8601) are tests/core/test_logging_ext.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT64 dims: [ -1 ] } ]
"""
MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({delay})

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            pb_utils.Logger.log_info(f"picky saw {{x.tolist()}}")
            if (x < 0).any():
                raise ValueError("negative input")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out
"""
KEYS = {"time", "level", "logger", "message", "request_id", "model", "pid", "file"}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve(
        {
            "picky": {"config.pbtxt": CONFIG, "1/model.py": MODEL.format(delay=0)},
            "slow": {"config.pbtxt": CONFIG, "1/model.py": MODEL.format(delay=0.6)},
        },
        "--log-format",
        "json",
        "--log-verbose=1",
    )


def _lines(srv: ServerProcess) -> list[dict[str, Any]]:
    """Every line of the server's output, each parsed as JSON (a line that is not fails the test)."""
    return [json.loads(line) for line in srv.log_path.read_text().splitlines() if line]


def _wait_for(srv: ServerProcess, request_id: str, text: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        lines = _lines(srv)
        if any(ln["request_id"] == request_id and text in ln["message"] for ln in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_every_line_is_one_json_object_with_the_same_fields(server):
    lines = _lines(server)
    assert lines and all(set(ln) - {"exception"} == KEYS for ln in lines)
    assert any(ln["message"].startswith("inferd ready in ") and ln["logger"] == "inferd.host.server" for ln in lines)
    assert all(ln["time"].endswith("Z") and ln["time"][10] == "T" for ln in lines)
    assert {ln["level"] for ln in lines} <= {"INFO", "WARNING", "ERROR", "VERBOSE1"}


def test_request_lines_carry_the_request_id_and_the_model(server):
    client = httpclient.InferenceServerClient(server.http_url)
    x = httpclient.InferInput("X", [2], "INT64")
    x.set_data_from_numpy(np.array([3, 1], np.int64))
    client.infer("picky", [x], request_id="json-good-1")
    with grpcclient.InferenceServerClient(server.grpc_url) as g:
        y = grpcclient.InferInput("X", [1], "INT64")
        y.set_data_from_numpy(np.array([-1], np.int64))
        with pytest.raises(InferenceServerException, match="negative input"):
            g.infer("picky", [y], request_id="json-bad-2")
    lines = _wait_for(server, "json-bad-2", "request failed")
    good = [ln for ln in lines if ln["request_id"] == "json-good-1"]
    assert [ln["message"] for ln in good] == ["picky saw [3, 1]"] and good[0]["model"] == "picky"
    bad = [ln for ln in lines if ln["request_id"] == "json-bad-2"]
    assert {ln["model"] for ln in bad} == {"picky"}
    failed = next(ln for ln in bad if "Failed to process the request(s)" in ln["message"])
    assert failed["level"] == "ERROR" and "ValueError: negative input" in failed["exception"]
    assert any("request failed" in ln["message"] and ln["level"] == "VERBOSE1" for ln in bad)
    outside = [ln for ln in lines if ln["message"].startswith("inferd ready")]
    assert outside[0]["request_id"] is None and outside[0]["model"] is None


def test_each_version_logs_when_its_load_starts_and_how_long_it_took(server):
    lines = [ln["message"] for ln in _lines(server)]
    for model in ("picky", "slow"):
        start = lines.index(f"loading: {model}:1")
        done = next(i for i, m in enumerate(lines) if m.startswith(f"successfully loaded '{model}' version 1 in "))
        assert start < done
    slow = next(m for m in lines if m.startswith("successfully loaded 'slow' version 1 in "))
    assert float(slow.split(" in ")[1].removesuffix(" s")) >= 0.6  # the model's initialize sleeps 0.6 s


def test_json_format_can_be_set_and_left_over_the_log_settings_api(tmp_path: Path):
    repo = write_repository(
        tmp_path / "models", {"picky": {"config.pbtxt": CONFIG, "1/model.py": MODEL.format(delay=0)}}
    )
    with ServerProcess([repo], ["--log-format=ISO8601"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.update_log_settings({"log_format": "json"})["log_format"] == "json"
        x = httpclient.InferInput("X", [1], "INT64")
        x.set_data_from_numpy(np.array([7], np.int64))
        client.infer("picky", [x], request_id="switched-3")
        deadline = time.monotonic() + 10
        while "switched-3" not in srv.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        last = srv.log_path.read_text().splitlines()[-1]
        assert json.loads(last)["request_id"] == "switched-3" and json.loads(last)["model"] == "picky"
        with pytest.raises(InferenceServerException, match="invalid argument for log_format, got: yaml"):
            client.update_log_settings({"log_format": "yaml"})
