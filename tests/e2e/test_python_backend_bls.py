"""Python backend BLS against a real ``inferd serve`` (models in-process and isolated): ``exec(decoupled=True)``, ``async_exec(decoupled=True)``
and bytes model names, through tritonclient HTTP and gRPC (and a gRPC stream for a decoupled caller).

What each call yields was taken from Triton 2.51 running the same models: every response of the
decoupled model, then one empty response for its flag-only final; one response from an ordinary
model; errors inside responses; a plain ``exec()`` of a decoupled model is refused with Triton's
sentence.
"""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

# Decoupled: IN responses OUT=0..IN-1, then a flag-only final; a negative IN is one final error.
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
REPEAT_PY = source("python_backend_bls_repeat")
TIMES10_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
TIMES10_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 10)]) for r in requests]
"""
# Calls another model as MODE says; OUT: every value received, INFO: what each response was.
CALLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "INFO" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
CALLER_PY = source("python_backend_bls_caller")
# async def execute: two decoupled BLS calls at once; OUT: both streams' values, in order.
ASYNC_CALLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""
ASYNC_CALLER_PY = source("python_backend_bls_async_caller")
# Decoupled: relays each response of "repeat" as it comes, then its own final flag.
RELAY_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
RELAY_PY = source("python_backend_bls_relay")


@pytest.fixture(scope="module", params=["in_process", "process"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    """Every model in the server process, or each in a stub process of its own (``EXECUTION_MODE``)."""
    mode = f'parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{request.param}" }} }}\n'

    def _model(config: str, code: str) -> dict[str, str]:
        return {"config.pbtxt": textwrap.dedent(config) + mode, "1/model.py": textwrap.dedent(code)}

    repo = {
        "repeat": _model(REPEAT_CONFIG, REPEAT_PY),
        "times10": _model(TIMES10_CONFIG, TIMES10_PY),
        "caller": _model(CALLER_CONFIG, CALLER_PY),
        "relay": _model(RELAY_CONFIG, RELAY_PY),
        "async_caller": _model(ASYNC_CALLER_CONFIG, ASYNC_CALLER_PY),
    }
    with serve(repo) as srv:
        yield srv


def _inputs(module, n: int, mode: str) -> list:
    x = module.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    m = module.InferInput("MODE", [1], "BYTES")
    m.set_data_from_numpy(np.array([mode.encode()], np.object_))
    return [x, m]


def _call(server, protocol: str, n: int, mode: str) -> tuple[list[int], list[str]]:
    if protocol == "http":
        client = httpclient.InferenceServerClient(server.http_url)
        result = client.infer("caller", _inputs(httpclient, n, mode))
    else:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        result = client.infer("caller", _inputs(grpcclient, n, mode))
    return result.as_numpy("OUT").tolist(), [s.decode() for s in result.as_numpy("INFO")]


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", ["sync", "bytes", "async"])
def test_decoupled_exec_yields_each_response_then_the_empty_final(server, protocol, mode):
    assert _call(server, protocol, 3, mode) == ([0, 1, 2], ["out", "out", "out", "empty"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoupled_exec_of_a_model_sending_only_the_final_flag(server, protocol):
    assert _call(server, protocol, 0, "sync") == ([], ["empty"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decoupled_exec_of_an_ordinary_model_yields_its_one_response(server, protocol):
    assert _call(server, protocol, 2, "ordinary") == ([20], ["out"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_execute_awaits_two_decoupled_calls(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    x = module.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([3], np.int32))
    assert client.infer("async_caller", [x]).as_numpy("OUT").tolist() == [0, 1, 2, 0, 1, 2]


def test_bytes_model_name_with_plain_exec(server):
    assert _call(server, "http", 4, "bytes_plain") == ([40], ["out"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_response_of_the_decoupled_model_is_surfaced(server, protocol):
    assert _call(server, protocol, -1, "sync") == ([], ["error:negative count"])


def test_plain_exec_of_a_decoupled_model_is_refused_with_tritons_sentence(server):
    values, [info] = _call(server, "http", 2, "plain_exec")
    assert values == []
    assert info.startswith(
        "error:Model repeat - Error when running inference: Model repeat is using the decoupled. The current BLS "
        "request call doesn't support models using the decoupled transaction policy."
    )
    assert "Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls" in info


def test_decoupled_exec_of_an_unknown_model_is_an_error_response(server):
    values, [info] = _call(server, "grpc", 1, "missing")
    assert values == [] and info.startswith("error:Model nope - Error when running inference: ") and "'nope'" in info
    assert httpclient.InferenceServerClient(server.http_url).is_server_live()


def test_decoupled_caller_relays_inner_responses_over_a_grpc_stream(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        x = grpcclient.InferInput("IN", [1], "INT32")
        x.set_data_from_numpy(np.array([3], np.int32))
        client.async_stream_infer("relay", [x], request_id="r", enable_empty_final_response=True)
        values, finals = [], []
        while not finals or not finals[-1]:
            result, error = got.get(timeout=30)
            assert error is None, error
            out = result.as_numpy("OUT")
            values.append(None if out is None else int(out[0]))
            finals.append(result.get_response().parameters["triton_final_response"].bool_param)
    finally:
        client.stop_stream()
    assert values == [100, 101, 102, None]
    assert finals == [False, False, False, True]
