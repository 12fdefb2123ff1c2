"""Triton's sentences where its QA and NVIDIA's example clients match them, request-controlled
text in the log, and a sweep of bad inputs Triton refuses (or should), on a real ``inferd serve``.

Sentences (Triton 2.51 and its QA: L0_input_validation, L0_trace, L0_http / L0_grpc aio tests):
missing inputs listed as ``['INPUT1','INPUT2']`` (``expected number of inputs between 3 and 4``
when one is optional), ``input byte size mismatch ...``, ``Request for unknown model : <name>``
for trace settings, ``... not allowed if polling is enabled`` outside explicit mode. The bad
inputs each answer 400 / INVALID_ARGUMENT naming the field, except a too-long override file
name, which is Triton's INTERNAL (NVIDIA's simple_grpc_model_control.py expects it).
"""

from __future__ import annotations

import http.client
import json
import re
import struct
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.service_pb2 as service_pb2
import tritonclient.grpc.service_pb2_grpc as service_pb2_grpc
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.servers import Servers

NO_OUTPUT_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def _inputs_config(optional: bool) -> str:
    inputs = [f'{{ name: "INPUT{i}" data_type: TYPE_FP32 dims: [ 1 ] }}' for i in range(3)]
    if optional:
        inputs.append('{ name: "INPUT3" data_type: TYPE_FP32 dims: [ 1 ] optional: true }')
    return f'backend: "python"\nmax_batch_size: 0\ninput [ {", ".join(inputs)} ]\noutput [ ]\n'


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "add_sub": models.add_sub(),
        "echo": models.simple(models.ECHO_CONFIG, models.ECHO_PY),
        "input_all_required": models.simple(_inputs_config(False), NO_OUTPUT_PY),
        "input_optional": models.simple(_inputs_config(True), NO_OUTPUT_PY),
    }
    args = ["--model-control-mode=explicit", "--load-model=*", "--log-verbose=1"]
    return serve(repo, *args)


def _http_error(srv: ServerProcess, method: str, path: str, body: bytes | str, headers: dict | None = None):
    conn = http.client.HTTPConnection(srv.http_url, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _both_fail(srv: ServerProcess, call) -> list[str]:
    """The messages of ``call(client)`` with the HTTP and the gRPC client (each must fail)."""
    messages = []
    for client in (httpclient.InferenceServerClient(srv.http_url), grpcclient.InferenceServerClient(srv.grpc_url)):
        with pytest.raises(InferenceServerException) as info:
            call(client)
        messages.append(info.value.message())
    return messages


def _fp32_inputs(module, names: list[str]) -> list:
    out = []
    for name in names:
        tensor = module.InferInput(name, [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        out.append(tensor)
    return out


# -- Triton's sentences -------------------------------------------------------------------


@pytest.mark.parametrize(("model", "expected"), [
    ("input_all_required", "expected 3 inputs but got 1 inputs for model 'input_all_required'. Got input(s) "
                           "['INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. Please provide all "
                           "required input(s)."),
    ("input_optional", "expected number of inputs between 3 and 4 but got 1 inputs for model 'input_optional'. "
                       "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1','INPUT2']. Please provide "
                       "all required input(s)."),
])  # fmt: skip
def test_missing_inputs_are_listed_as_triton_lists_them(server: ServerProcess, model: str, expected: str) -> None:
    for message, module in zip(_both_fail(server, lambda c: c.infer(model, _fp32_inputs(
            httpclient if isinstance(c, httpclient.InferenceServerClient) else grpcclient, ["INPUT0"]))),
            (httpclient, grpcclient), strict=True):  # fmt: skip
        assert expected in message, (module.__name__, message)


def test_input_byte_size_sentence(server: ServerProcess) -> None:
    """L0_input_validation: data for 6 elements sent with the shape [1,4] of 4."""
    for module in (httpclient, grpcclient):
        client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
        tensors = []
        for name in ("INPUT0", "INPUT1"):
            tensor = module.InferInput(name, [1, 6], "FP32")
            if module is httpclient:
                tensor.set_data_from_numpy(np.ones((1, 6), np.float32), binary_data=True)
            else:
                tensor.set_data_from_numpy(np.ones((1, 6), np.float32))
            tensor.set_shape([1, 4])
            tensors.append(tensor)
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", tensors)
        assert "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 24" in (
            info.value.message()
        ), module.__name__


def test_trace_settings_of_an_unknown_model(server: ServerProcess) -> None:
    """L0_trace/trace_endpoint_test.py: ``Request for unknown model : does-not-exist``."""
    for message in _both_fail(server, lambda c: c.get_trace_settings(model_name="does-not-exist")):
        assert message.endswith("Request for unknown model : does-not-exist")
    for message in _both_fail(server, lambda c: c.update_trace_settings("does-not-exist", {"trace_rate": "2"})):
        assert message.endswith("Request for unknown model : does-not-exist")


def test_load_outside_explicit_mode_says_polling(tmp_path: Path) -> None:
    """L0_http / L0_grpc aio tests: model control "none" answers Triton's polling sentence."""
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    with ServerProcess([repo], ["--model-control-mode=none"]) as srv:
        messages = _both_fail(srv, lambda c: c.load_model("add_sub")) + _both_fail(srv, lambda c: c.unload_model("x"))
    assert all(m.split("] ")[-1].startswith("explicit model load / unload is not allowed if polling is enabled")
               for m in messages), messages  # fmt: skip


# -- generate, and request text in the log ----------------------------------------------


def test_generate_takes_the_id_and_refuses_duplicate_keys(server: ServerProcess) -> None:
    status, body = _http_error(server, "POST", "/v2/models/echo/generate", json.dumps({"TEXT": "abc", "id": "r-7"}))
    assert status == 200 and body["id"] == "r-7" and body["TEXT_OUT"] == "cba"
    assert json.loads(body["META"][1])["id"] == "r-7"  # also a parameter, as Triton passes it
    for raw, field in (('{"TEXT": "a", "TEXT": "b"}', "TEXT"), ('{"TEXT": "a", "parameters": {"k": 1, "k": 2}}', "k")):
        status, body = _http_error(server, "POST", "/v2/models/echo/generate", raw)
        assert status == 400 and f"the key '{field}' more than once" in body["error"], body
    status, body = _http_error(server, "POST", "/v2/models/echo/generate", '{"TEXT": "a", "id": 5}')
    assert status == 400 and body["error"].startswith("Unable to parse 'id'")


def _log_lines_after(srv: ServerProcess, mark: str) -> list[str]:
    text = srv.log_path.read_text(errors="replace")
    return text[text.rfind("\n", 0, text.rindex(mark)) + 1 :].splitlines() if mark in text else []


@pytest.mark.parametrize("log_format", ["default", "ISO8601", "json"])
def test_request_text_cannot_forge_log_lines(server: ServerProcess, log_format: str) -> None:
    """A request id and an input name holding line breaks, ESC and C1 controls reach the log
    (the failed request is logged at verbose level 1) escaped, in every log format."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.update_log_settings({"log_format": log_format})
    try:
        mark = f"forge-mark-{log_format}"
        evil = f"{mark}\nE0101 00:00:00.000000 1 forged.py:1] FORGED\r\x1b[31m\x9b\u2028"
        tensor = httpclient.InferInput(f"IN\nE0101 forged.py:2] FORGED-{log_format}", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        with pytest.raises(InferenceServerException):
            client.infer("add_sub", [tensor], request_id=evil)
        lines = []
        for _ in range(50):  # the log is written by the server process: poll for the line
            lines = _log_lines_after(server, mark)
            if any("FORGED-" in ln for ln in lines):
                break
            __import__("time").sleep(0.1)
        logged = [ln for ln in lines if "FORGED" in ln]
        assert logged, lines
        assert not any(ln.startswith(("E0101", "FORGED")) or "\x1b" in ln or "\x9b" in ln for ln in lines)
        if log_format == "json":
            entry = json.loads(logged[0])
            assert "\\nE0101" in entry["request_id"] and "\\x1b[31m" in entry["request_id"]
        else:
            assert "\\nE0101 00:00:00.000000 1 forged.py:1] FORGED\\r\\x1b[31m\\x9b\\u2028" in logged[0]
    finally:
        client.update_log_settings({"log_format": "default"})


# -- bad inputs ----------------------------------------------------------------------------

ADD_SUB_INPUTS = [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]


@pytest.mark.parametrize(("parameters", "field"), [
    ({"p": [1, 2]}, "parameter 'p' has invalid type"),
    ({"p": {"a": 1}}, "parameter 'p' has invalid type"),
    ({"p": None}, "parameter 'p' has invalid type"),
    ({"p": -9223372036854775809}, "parameter 'p' has invalid type"),
    ({"p": 18446744073709551616}, "parameter 'p' has invalid type"),
])  # fmt: skip
def test_request_parameters_of_other_kinds_are_refused(server: ServerProcess, parameters: dict, field: str) -> None:
    body = json.dumps({"inputs": ADD_SUB_INPUTS, "parameters": parameters})
    status, answer = _http_error(server, "POST", "/v2/models/add_sub/infer", body)
    assert status == 400 and answer["error"].startswith(field), answer


def test_int64_parameters_at_the_limits_pass(server: ServerProcess) -> None:
    body = json.dumps({"inputs": ADD_SUB_INPUTS, "parameters": {"lo": -(2**63), "hi": 2**63 - 1, "f": 0.5}})
    assert _http_error(server, "POST", "/v2/models/add_sub/infer", body)[0] == 200


def test_surrogates_in_id_and_parameters_are_refused(server: ServerProcess) -> None:
    """UTF-8-encoded surrogates (ED A0 80) are not UTF-8: Python's JSON reader lets them through."""
    for doc, field in (
        (b'{"id": "a\xed\xa0\x80b", "inputs": %s}', "request 'id' is not valid UTF-8"),
        (b'{"parameters": {"p": "\xed\xa0\x80"}, "inputs": %s}', "parameter 'p' is not valid UTF-8"),
        (b'{"parameters": {"p": "\\ud800"}, "inputs": %s}', "parameter 'p' is not valid UTF-8"),
    ):
        status, answer = _http_error(
            server, "POST", "/v2/models/add_sub/infer", doc % json.dumps(ADD_SUB_INPUTS).encode()
        )
        assert status == 400 and field in answer["error"], answer


def test_nested_output_parameters_are_refused(server: ServerProcess) -> None:
    nested: dict = {}
    for _ in range(70):
        nested = {"a": nested}
    body = json.dumps({"inputs": ADD_SUB_INPUTS, "outputs": [{"name": "OUTPUT0", "parameters": {"deep": nested}}]})
    status, answer = _http_error(server, "POST", "/v2/models/add_sub/infer", body)
    assert status == 400 and answer["error"].startswith("parameter 'outputs.parameters.deep' has invalid type"), answer


def test_generate_parameters_must_be_an_object(server: ServerProcess) -> None:
    status, answer = _http_error(server, "POST", "/v2/models/echo/generate", '{"TEXT": "a", "parameters": "x"}')
    assert status == 400 and answer["error"].startswith("Expected JSON object for keyword: 'parameters'"), answer


def test_trace_rate_with_two_values_is_refused(server: ServerProcess) -> None:
    for message in _both_fail(server, lambda c: c.update_trace_settings(settings={"trace_rate": ["1", "2"]})):
        assert "Unable to parse 'trace_rate'" in message and "one value" in message


def _grpc_error(srv: ServerProcess, request: service_pb2.ModelInferRequest) -> grpc.RpcError:
    with grpc.insecure_channel(srv.grpc_url) as channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    return info.value


def test_grpc_binary_data_output_must_be_a_bool(server: ServerProcess) -> None:
    """(tritonclient refuses to send the reserved parameter, so the request is built by hand)"""
    request = service_pb2.ModelInferRequest(
        model_name="add_sub", raw_input_contents=[np.ones(4, np.float32).tobytes()] * 2
    )
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
    request.parameters["binary_data_output"].int64_param = 1
    error = _grpc_error(server, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "'binary_data_output'" in error.details()


def test_grpc_bytes_with_trailing_bytes_is_refused(server: ServerProcess) -> None:
    """Length prefixes covering less than the raw buffer: Triton's ValidateBytesInputs sentence."""
    raw = struct.pack("<I", 3) + b"abc" + b"xy"
    request = service_pb2.ModelInferRequest(model_name="echo", raw_input_contents=[raw])
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
    error = _grpc_error(server, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("incomplete string length indicator for inference input 'TEXT' for model "
                                           "'echo', expecting 4 bytes but only 2 bytes available")  # fmt: skip


def test_override_file_name_of_256_characters_is_internal(server: ServerProcess) -> None:
    """NVIDIA's simple_grpc_model_control.py expects INTERNAL (Triton fails writing the file)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    config = json.dumps({"backend": "python", "max_batch_size": 8, "input": [], "output": []})
    with pytest.raises(InferenceServerException) as info:
        client.load_model("add_sub", config=config, files={"file:1/" + "a" * 256: b"x"})
    assert info.value.status() == "StatusCode.INTERNAL", info.value
    assert re.search("file path 'file:1/a+\\.\\.\\.' is too long", info.value.message())
    assert client.is_model_ready("add_sub")  # the refused reload left the served version alone
