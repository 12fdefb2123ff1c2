"""Header forwarding of values with edge spaces (Triton's ``qa/L0_parameters`` headers with a space at
an end), per transport, against a real ``inferd serve`` with tritonclient: HTTP (httptools), gRPC
over h2 (zttp) and over grpcio.

What Triton 2.51 forwarded to ``request.parameters()`` with ``--http-header-forward-pattern my_.*``
and ``--grpc-header-forward-pattern my_.*`` (the same Python model) is each test's constant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.python_models import python_model
from tests.servers import Servers
from tests.triton_clients import error_of

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
SENT = ("trailing ", " leading")
# Observed from Triton 2.51 over HTTP: the leading space dropped, the trailing one kept.
TRITON_HTTP = {"trailing ": "trailing ", " leading": "leading"}
# Observed from Triton 2.51 over gRPC (grpcio server): both kept.
TRITON_GRPC = {"trailing ": "trailing ", " leading": " leading"}
# inferd over HTTP: both dropped (RFC 9110 5.5; listed in the differences).
INFERD_HTTP = {"trailing ": "trailing", " leading": "leading"}
# inferd over the h2 transport: INVALID_ARGUMENT with this sentence, not a reset stream.
H2_REFUSAL = (
    "the request's headers break RFC 9113 8.2 and this server's HTTP/2 transport (--grpc-transport h2) cannot "
    "accept them: most often a metadata value that begins or ends with a space or tab; strip it, or serve with "
    "--grpc-transport grpcio, which accepts such values as Triton does"
)


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    flags = ["--grpc-transport", request.param, "--http-header-forward-pattern", "my_.*",
             "--grpc-header-forward-pattern", "my_.*"]  # fmt: skip
    with serve({"params": python_model("parameters", CONFIG)}, *flags) as proc:
        proc.transport = request.param  # type: ignore[attr-defined]
        yield proc


def _infer(module: Any, client: Any, value: str) -> Any:
    tensor = module.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    result = client.infer("params", [tensor], headers={"my_header": value})
    return json.loads(result.as_numpy("PARAMS")[0])["my_header"]


def test_http_values_lose_their_edge_spaces(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert {value: _infer(httpclient, client, value) for value in SENT} == INFERD_HTTP
    assert INFERD_HTTP != TRITON_HTTP  # the trailing space: a difference on purpose
    client.close()


def test_grpc_values_with_edge_spaces(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    if server.transport == "grpcio":  # type: ignore[attr-defined]
        assert {value: _infer(grpcclient, client, value) for value in SENT} == TRITON_GRPC
    else:
        for value in SENT:
            assert error_of(lambda v=value: _infer(grpcclient, client, v)) == (  # type: ignore[misc]
                "StatusCode.INVALID_ARGUMENT",
                H2_REFUSAL,
            )
        assert _infer(grpcclient, client, "plain") == "plain"  # the connection serves on
        assert "refused (answered INVALID_ARGUMENT)" in server.log()
    client.close()
