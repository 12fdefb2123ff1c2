"""Triton's header forwarding (``--http-header-forward-pattern``, ``--grpc-header-forward-pattern``) and
gRPC metadata values with edge spaces, end to end with tritonclient, on both gRPC transports.

What Triton 2.51 does was read off the real server (/work/shared/triton, the same Python model):
the matching headers reach ``request.parameters()`` as strings, into an ensemble's step too, after the
request's own parameters (a header wins), matched case-insensitively and anywhere in the name; a
stream's metadata reaches each of its requests; gRPC metadata values keep their spaces. Reserved
names are refused with the sentence Triton has used since (``src/common.h`` ``kReservedParameterKeys``).
"""

from __future__ import annotations

import json
import queue
import socket
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.python_models import source
from tests.servers import Servers

PARAMS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
PARAMS_PY = source("parameters")
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "params" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "PARAMS" value: "PARAMS" } } ] }
"""
#: Upper case, as Triton's QA (L0_parameters) checks case-insensitivity; reserved names match too.
PATTERN = "MY_HEADER.*|^priority$|^triton_"
#: The credential of the restricted inference API (grpcio server): it matches, and is withheld.
SECRET = {"my_header_key": "s3cret"}
GRPC_SECRET = {"triton-grpc-protocol-my_header_key": "s3cret"}
#: Triton's L0_parameters headers: two forwarded, one not.
SENT = {"header_1": "value_1", "my_header_1": "my_value_1", "my_header_2": 'a "quoted" string with a backslash\\'}
FORWARDED = {"my_header_1": "my_value_1", "my_header_2": 'a "quoted" string with a backslash\\'}


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    """h2 without access rules; grpcio with restricted inference on both protocols (the credential
    headers match the pattern and must not be forwarded)."""
    repo = {"params": models.simple(PARAMS_CONFIG, PARAMS_PY), "ens": {"config.pbtxt": ENSEMBLE, "1/.keep": ""}}
    args = ["--grpc-transport", request.param, "--http-header-forward-pattern", PATTERN,
            "--grpc-header-forward-pattern", PATTERN]  # fmt: skip
    if request.param == "grpcio":
        args += ["--http-restricted-api", "inference:my_header_key=s3cret",
                 "--grpc-restricted-protocol", "inference:my_header_key=s3cret"]  # fmt: skip
    with serve(repo, *args) as proc:
        proc.transport = request.param  # type: ignore[attr-defined]
        yield proc


def _inputs(module) -> list:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1], np.float32))
    return [tensor]


def _seen(result) -> dict:  # type: ignore[no-untyped-def]
    """What the model read from ``request.parameters()``."""
    return json.loads(result.as_numpy("PARAMS")[0])


def _grpc_secret(server: ServerProcess) -> dict[str, str]:
    return GRPC_SECRET if server.transport == "grpcio" else {}  # type: ignore[attr-defined]


def test_grpc_metadata_reaches_the_model_as_string_parameters(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    headers = {**SENT, **_grpc_secret(server)}
    for model in ("params", "ens"):  # the ensemble's step sees them too
        assert _seen(client.infer(model, _inputs(grpcclient), headers=headers)) == FORWARDED
    # a deadline takes h2's ASGI path; a header wins over a request parameter of its name (as the
    # model reads Triton's two keys)
    result = client.infer("params", _inputs(grpcclient), headers=headers, client_timeout=60,
                          parameters={"my_header_1": 5, "other": True})  # fmt: skip
    assert _seen(result) == {**FORWARDED, "other": True}
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result), headers=headers)
    for _ in range(2):  # the stream's metadata reaches each of its requests
        client.async_stream_infer("params", _inputs(grpcclient))
    for _ in range(2):
        assert _seen(results.get(timeout=30)) == FORWARDED
    client.stop_stream()
    client.close()


def test_reserved_names_are_refused_with_tritons_sentence(server: ServerProcess) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    for name in ("priority", "triton_x"):
        sentence = f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
        with pytest.raises(InferenceServerException, match="reserved") as err:
            grpc.infer("params", _inputs(grpcclient), headers={name: "1", **_grpc_secret(server)})
        assert (err.value.status(), err.value.message()) == ("StatusCode.INVALID_ARGUMENT", sentence)
        with pytest.raises(InferenceServerException, match="reserved") as err:
            http.infer("params", _inputs(httpclient), headers={name: "1", **SECRET})
        assert (err.value.status(), err.value.message()) == ("400", sentence)
    grpc.close()
    http.close()


def _chunked_infer(server: ServerProcess, headers: bytes) -> dict:
    """An infer request with a chunked body (the ASGI route, not the direct path); what the model saw."""
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}).encode()
    host, port = server.http_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v2/models/params/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + headers
                     + b"Connection: close\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")  # fmt: skip
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, reply = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer
    return json.loads(json.loads(reply)["outputs"][0]["data"][0])


def test_http_headers_reach_the_model_on_both_paths(server: ServerProcess) -> None:
    if server.transport != "grpcio":  # type: ignore[attr-defined]
        pytest.skip("HTTP is the same on both servers: checked once, on the one with access rules")
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    for model in ("params", "ens"):  # the direct path (Content-Length)
        assert _seen(client.infer(model, _inputs(httpclient), headers={**SENT, **SECRET})) == FORWARDED
    result = client.infer("params", _inputs(httpclient), headers={**SENT, **SECRET},
                          parameters={"my_header_1": 5, "other": True})  # fmt: skip
    assert _seen(result) == {**FORWARDED, "other": True}
    client.close()
    # the ASGI route; names are lowercase (HTTP/1.1 names are case-insensitive), values UTF-8
    seen = _chunked_infer(server, b"My_Header_3: caf\xc3\xa9\r\nheader_4: no\r\nmy_header_key: s3cret\r\n")
    assert seen == {"my_header_3": "caf\u00e9"}


def test_padded_metadata_value(server: ServerProcess) -> None:
    """grpcio (as Triton) keeps a value's edge spaces; h2 (zttp) refuses the call, RFC 9113 8.2.1,
    answering INVALID_ARGUMENT with why (tests/e2e/test_parity_qa_headers.py) and saying so in the
    log; the connection serves on."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    padded = {"my_header_pad": " padded value ", **_grpc_secret(server)}
    if server.transport == "grpcio":  # type: ignore[attr-defined]
        assert client.is_server_live(headers=padded)
        assert _seen(client.infer("params", _inputs(grpcclient), headers=padded)) == {"my_header_pad": " padded value "}
    else:
        with pytest.raises(InferenceServerException, match="break RFC 9113 8.2"):
            client.is_server_live(headers={"my_header": "trailing space "})
        assert client.is_server_live()
        assert "refused (answered INVALID_ARGUMENT): its headers break RFC 9113 8.2" in server.log()
    client.close()
