"""Which request parameters a Python model sees in ``request.parameters()``: Triton's reserved ones
never, a client's own always, over HTTP and gRPC, in-process and isolated (``EXECUTION_MODE: process``).

What Triton 2.51 does was read off the real server (/work/shared/triton, the same model returning
``request.parameters()``): ``sequence_id``, ``sequence_start``, ``sequence_end``, ``priority`` and
``timeout`` become request properties on both protocols; ``binary_data_output`` is consumed over
HTTP but reaches the model over gRPC; ``triton_enable_empty_final_response`` (tritonclient and
perf_analyzer send it on every gRPC stream request) steers the stream and never reaches the model;
any other ``triton_...`` name is refused (400 over HTTP, INVALID_ARGUMENT over gRPC, each protocol
with its own sentence); ``headers``, ``binary_data``, ``binary_data_size``, ``shared_memory_*`` and
``classification`` are a request's own parameters there and reach the model as sent.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
DECOUPLED = "model_transaction_policy { decoupled: true }\n"
PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }\n'
MODEL_PY = source("parameters")
DECOUPLED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMS", np.array([r.parameters()], dtype=np.object_))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
#: A client's own parameters, the names Triton leaves to requests included.
OWN = {"user_key": "v", "n": 3, "flag": True, "headers": "h", "binary_data": True, "binary_data_size": 4,
       "shared_memory_region": "r", "shared_memory_offset": 0, "classification": 2, "Triton_x": 1}  # fmt: skip
#: Triton's request properties (sequence_id 0: no sequence): never in ``request.parameters()``.
PROPERTIES = {"sequence_id": 0, "sequence_start": False, "sequence_end": False, "priority": 0, "timeout": 100000000}
HTTP_SENTENCE = "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."
GRPC_SENTENCE = ("parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
                 "starting with 'triton_' are allowed: triton_enable_empty_final_response")  # fmt: skip


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve(
        {
            "params": models.simple(CONFIG, MODEL_PY),
            "params_isolated": models.simple(CONFIG + PROCESS, MODEL_PY),
            "stream": models.simple(CONFIG + DECOUPLED, DECOUPLED_PY),
            "stream_isolated": models.simple(CONFIG + DECOUPLED + PROCESS, DECOUPLED_PY),
        }
    )


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _inputs(module) -> list:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1], np.float32))
    return [tensor]


def _http(server: ServerProcess, model: str, parameters: dict) -> httpx.Response:
    body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}], "parameters": parameters}
    return httpx.post(f"http://{server.http_url}/v2/models/{model}/infer", json=body, timeout=60)


def _grpc_request(model: str, parameters: dict) -> service_pb2.ModelInferRequest:
    """A raw ModelInferRequest: tritonclient refuses reserved names before sending them."""
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
    assert tensor is not None
    request.raw_input_contents.append(np.array([1], np.float32).tobytes())
    for key, value in parameters.items():
        param = request.parameters[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        else:
            param.string_param = value
    return request


def _seen_grpc(response: service_pb2.ModelInferResponse) -> dict:
    raw = response.raw_output_contents[0]
    return json.loads(raw[4:])  # one BYTES element: its 4-byte length, then the text


@pytest.mark.parametrize("model", ["params", "params_isolated"])
def test_over_http_the_model_sees_its_own_parameters_only(server: ServerProcess, model: str) -> None:
    answer = _http(server, model, {**OWN, **PROPERTIES, "binary_data_output": False})
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.json()["outputs"][0]["data"][0]) == OWN
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer(model, _inputs(httpclient), parameters={"user_key": "v"}, priority=1, timeout=100000000)
    assert json.loads(result.as_numpy("PARAMS")[0]) == {"user_key": "v"}
    client.close()


@pytest.mark.parametrize("model", ["params", "params_isolated"])
def test_over_grpc_the_model_sees_its_own_parameters_only(
    server: ServerProcess, stub: service_pb2_grpc.GRPCInferenceServiceStub, model: str
) -> None:
    sent = {**OWN, **PROPERTIES, "triton_enable_empty_final_response": True}
    assert _seen_grpc(stub.ModelInfer(_grpc_request(model, sent), timeout=60)) == OWN
    # over gRPC Triton passes binary_data_output on (only its HTTP frontend reads it)
    assert _seen_grpc(stub.ModelInfer(_grpc_request(model, {"binary_data_output": True}), timeout=60)) == {
        "binary_data_output": True
    }
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer(model, _inputs(grpcclient), parameters={"user_key": "v"}, priority=1, timeout=100000000)
    assert json.loads(result.as_numpy("PARAMS")[0]) == {"user_key": "v"}
    client.close()


@pytest.mark.parametrize("model", ["stream", "stream_isolated"])
def test_a_stream_s_empty_final_flag_steers_the_stream_and_stays_away_from_the_model(
    server: ServerProcess, model: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put(error or result))
    client.async_stream_infer(model, _inputs(grpcclient), parameters={"user_key": "v"},
                              enable_empty_final_response=True)  # fmt: skip
    first = results.get(timeout=60)
    assert json.loads(first.as_numpy("PARAMS")[0]) == {"user_key": "v"}
    last = results.get(timeout=60)  # the empty final response the flag asked for
    assert last.as_numpy("PARAMS") is None
    assert last.get_response().parameters["triton_final_response"].bool_param is True
    client.stop_stream()
    client.close()


def test_other_triton_names_are_refused_with_tritons_sentences(
    server: ServerProcess, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    for name in ("triton_x", "triton_final_response", "triton_enable_empty_final_response"):
        answer = _http(server, "params", {"user_key": "v", name: True})
        assert answer.status_code == 400
        assert answer.json()["error"] == f"{HTTP_SENTENCE}; got '{name}'"
    for name in ("triton_x", "triton_final_response"):
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(_grpc_request("params", {name: True}), timeout=60)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == f"{GRPC_SENTENCE}; got '{name}'"
        answers = list(stub.ModelStreamInfer(iter([_grpc_request("stream", {name: True})]), timeout=60))
        assert [a.error_message for a in answers] == [f"{GRPC_SENTENCE}; got '{name}'"]
    assert _http(server, "params", {"user_key": "v"}).status_code == 200  # the server is still up
