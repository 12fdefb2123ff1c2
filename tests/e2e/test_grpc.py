"""The gRPC frontend end to end: a real ``inferd serve`` and the official ``tritonclient.grpc``.

Status codes asserted here are those the real Triton 2.51 answers for the same requests.
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.python_models import python_model, source
from tests.servers import Servers
from tests.triton_clients import add_sub_inputs, tensor

TYPES_CONFIG = """
name: "types"
backend: "python"
max_batch_size: 0
input [
  { name: "IN_INT64" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "IN_BOOL" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "IN_FP16" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "IN_BYTES" data_type: TYPE_STRING dims: [ -1 ] }
]
output [
  { name: "OUT_INT64" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "OUT_BOOL" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "OUT_FP16" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "OUT_BYTES" data_type: TYPE_STRING dims: [ -1 ] }
]
"""
TYPES_PY = source("grpc_types")
PARAMS_CONFIG = """
name: "params"
backend: "python"
max_batch_size: 0
input [ { name: "DUMMY" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
PARAMS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("PARAMS", np.array([r.parameters().encode()], dtype=np.object_))])
            for r in requests]
"""
FAIL_CONFIG = """
name: "fail"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
FAIL_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0] < 0:
                raise ValueError("negative input is refused")
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""
REPEAT_CONFIG = """
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
REPEAT_PY = source("grpc_repeat")


MODELS: dict[str, dict[str, str]] = {
    "sleep": python_model("sleep"),
    "add_sub": models.add_sub(),
    "types": {"config.pbtxt": TYPES_CONFIG, "1/model.py": TYPES_PY},
    "params": {"config.pbtxt": PARAMS_CONFIG, "1/model.py": PARAMS_PY},
    "fail": {"config.pbtxt": FAIL_CONFIG, "1/model.py": FAIL_PY},
    "repeat": {"config.pbtxt": REPEAT_CONFIG, "1/model.py": REPEAT_PY},
}


@pytest.fixture(scope="module", params=["grpcio", "h2"])
def transport(request: pytest.FixtureRequest) -> list[str]:
    """Every test runs against both gRPC transports."""
    return ["--grpc-transport", request.param]


@pytest.fixture(scope="module")
def server(serve: Servers, transport: list[str]) -> Iterator[ServerProcess]:
    with serve(MODELS, *transport) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def assert_healthy(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    a = np.ones((1, 4), np.float32)
    result = client.infer("add_sub", add_sub_inputs(grpcclient, a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


# -- health and metadata --------------------------------------------------------------------------


def test_server_live_ready_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "inferd"
    assert meta["version"]
    assert "model_repository" in meta["extensions"]
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("no_such_model")


def test_health_check_service(server: ServerProcess) -> None:
    from inferd.frontends.grpc import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("add_sub", as_json=True)
    assert meta["name"] == "add_sub"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "python"
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("INPUT0", "FP32", ["-1", "4"]),
        ("INPUT1", "FP32", ["-1", "4"]),
    ]
    assert [t["name"] for t in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("add_sub").config
    assert config.name == "add_sub"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [(i.name, i.dims) for i in config.input] == [("INPUT0", [4]), ("INPUT1", [4])]
    assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]
    assert config.input[0].data_type == 11  # TYPE_FP32
    assert config.instance_group[0].count == 1  # Triton's default for a group that sets none
    assert client.get_model_config("repeat").config.model_transaction_policy.decoupled


# -- inference ------------------------------------------------------------------------------------


def test_infer_fp32_raw(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    result = client.infer("add_sub", add_sub_inputs(grpcclient, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.model_name == "add_sub"
    assert response.model_version == "1"


def test_infer_int64_bool_fp16_bytes(client: grpcclient.InferenceServerClient) -> None:
    i64 = np.array([1, -2, 2**40], dtype=np.int64)
    flags = np.array([True, False, True])
    half = np.array([0.5, -1.25, 3.0], dtype=np.float16)
    words = np.array([b"alpha", b"", "ßeta".encode()], dtype=np.object_)
    result = client.infer(
        "types",
        [
            tensor("IN_INT64", i64, "INT64"),
            tensor("IN_BOOL", flags, "BOOL"),
            tensor("IN_FP16", half, "FP16"),
            tensor("IN_BYTES", words, "BYTES"),
        ],
    )
    np.testing.assert_array_equal(result.as_numpy("OUT_INT64"), i64 * 3)
    np.testing.assert_array_equal(result.as_numpy("OUT_BOOL"), ~flags)
    out_half = result.as_numpy("OUT_FP16")
    assert out_half.dtype == np.float16
    np.testing.assert_array_equal(out_half, half * 2)
    assert list(result.as_numpy("OUT_BYTES")) == [b"ALPHA", b"", "ßeta".encode().upper()]


def test_requested_output_subset_and_request_id(client: grpcclient.InferenceServerClient) -> None:
    a = np.full((1, 4), 3, np.float32)
    b = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = client.infer(
        "add_sub",
        add_sub_inputs(grpcclient, a, b),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
        request_id="req-42",
    )
    response = result.get_response()
    assert response.id == "req-42"
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


def test_parameters_reach_the_model(client: grpcclient.InferenceServerClient) -> None:
    params = {"text": "hello", "count": -3, "flag": True, "ratio": 0.25}
    result = client.infer("params", [tensor("DUMMY", np.array([1], np.int32), "INT32")], parameters=params)
    seen = json.loads(result.as_numpy("PARAMS")[0])
    assert seen == params


def test_typed_contents(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    request = service_pb2.ModelInferRequest(model_name="add_sub", id="typed")
    a, b = [1.5, 2.0, -3.0, 4.0], [0.5, 1.0, 1.0, -4.0]
    for name, values in (("INPUT0", a), ("INPUT1", b)):
        t = request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        t.contents.fp32_contents.extend(values)
    response = stub.ModelInfer(request)
    assert response.id == "typed"
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert list(response.outputs[0].shape) == [1, 4]
    expected = np.array(a, np.float32) + np.array(b, np.float32)
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], np.float32), expected)


def test_typed_contents_errors(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    def request(values: int, raw: bool = False) -> service_pb2.ModelInferRequest:
        r = service_pb2.ModelInferRequest(model_name="add_sub")
        for name, count in (("INPUT0", values), ("INPUT1", 4)):
            r.inputs.add(name=name, datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend([1.0] * count)
        if raw:
            r.raw_input_contents.extend([np.zeros(4, np.float32).tobytes()] * 2)
        return r

    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request(5))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:  # raw and typed contents in one request
        stub.ModelInfer(request(4, raw=True))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in info.value.details()


# -- errors ---------------------------------------------------------------------------------------


def _wrong_dtype() -> tuple[str, list[grpcclient.InferInput]]:
    a = np.ones((1, 4), np.float32)
    return "add_sub", [tensor("INPUT0", a.astype(np.int32), "INT32"), tensor("INPUT1", a, "FP32")]


def _wrong_shape() -> tuple[str, list[grpcclient.InferInput]]:
    a = np.ones((1, 4), np.float32)
    return "add_sub", [tensor("INPUT0", np.ones((1, 5), np.float32), "FP32"), tensor("INPUT1", a, "FP32")]


def _missing_input() -> tuple[str, list[grpcclient.InferInput]]:
    return "add_sub", [tensor("INPUT0", np.ones((1, 4), np.float32), "FP32")]


def _raw_size_mismatch() -> tuple[str, list[grpcclient.InferInput]]:
    a = np.ones((1, 4), np.float32)
    bad = tensor("INPUT1", a, "FP32")
    bad.set_shape([1, 3])  # 16 bytes of data for a shape that needs 12
    return "add_sub", [tensor("INPUT0", a, "FP32"), bad]


def _huge_shape() -> tuple[str, list[grpcclient.InferInput]]:
    a = np.ones((1, 4), np.float32)
    bad = tensor("INPUT0", a, "FP32")
    bad.set_shape([2**40, 4])
    return "add_sub", [bad, tensor("INPUT1", a, "FP32")]


def _unknown_model() -> tuple[str, list[grpcclient.InferInput]]:
    return "no_such_model", [tensor("INPUT0", np.ones((1, 4), np.float32), "FP32")]


@pytest.mark.parametrize(
    ("build", "status", "named"),
    [
        (_unknown_model, "StatusCode.NOT_FOUND", "no_such_model"),
        (_wrong_dtype, "StatusCode.INVALID_ARGUMENT", "INPUT0"),
        (_wrong_shape, "StatusCode.INVALID_ARGUMENT", "INPUT0"),
        (_missing_input, "StatusCode.INVALID_ARGUMENT", "INPUT1"),
        (_raw_size_mismatch, "StatusCode.INVALID_ARGUMENT", "INPUT1"),
        (_huge_shape, "StatusCode.INVALID_ARGUMENT", "INPUT0"),
    ],
    ids=["unknown-model", "wrong-dtype", "wrong-shape", "missing-input", "raw-size", "huge-shape"],
)
def test_infer_errors(client: grpcclient.InferenceServerClient, build: Any, status: str, named: str) -> None:
    model, inputs = build()
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, inputs)
    assert info.value.status() == status
    assert named in info.value.message()
    assert_healthy(client)


def test_decoupled_model_over_unary_is_unimplemented(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("repeat", [tensor("COUNT", np.array([2], np.int32), "INT32")])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "decoupled" in info.value.message()


def test_model_error_fails_only_that_request(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("fail", [tensor("INPUT0", np.array([-1], np.float32), "FP32")])
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "negative input is refused" in info.value.message()
    result = client.infer("fail", [tensor("INPUT0", np.array([2.5], np.float32), "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2.5])


def test_shared_memory_rpcs_answer(client: grpcclient.InferenceServerClient) -> None:
    """Once UNIMPLEMENTED; tests/e2e/test_shared_memory.py covers the extension."""
    assert len(client.get_system_shared_memory_status().regions) == 0
    assert len(client.get_cuda_shared_memory_status().regions) == 0


def test_statistics_count(client: grpcclient.InferenceServerClient) -> None:
    def success() -> int:
        stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
        assert [(s["name"], s["version"]) for s in stats] == [("add_sub", "1")]
        return int(stats[0]["inference_stats"]["success"].get("count", 0))

    before = success()
    a = np.ones((1, 4), np.float32)
    n = 5
    for _ in range(n):
        client.infer("add_sub", add_sub_inputs(grpcclient, a, a))
    assert success() - before == n
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("no_such_model")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


# -- streaming ------------------------------------------------------------------------------------


def test_stream_many_requests(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        sent = {}
        for i in range(6):
            a = np.full((1, 4), i, np.float32)
            b = np.arange(4, dtype=np.float32).reshape(1, 4)
            sent[f"s{i}"] = a + b
            client.async_stream_infer("add_sub", add_sub_inputs(grpcclient, a, b), request_id=f"s{i}")
        got = {}
        for _ in sent:
            result, error = results.get(timeout=20)
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert got.keys() == sent.keys()
    for rid, expected in sent.items():
        np.testing.assert_array_equal(got[rid], expected)


def test_stream_requests_run_concurrently(client: grpcclient.InferenceServerClient) -> None:
    """A slow request sent first does not hold back a fast one sent after it on the same stream."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for rid, seconds in (("slow", 0.8), ("fast", 0.0)):
            client.async_stream_infer(
                "sleep", [tensor("SECONDS", np.array([seconds], np.float32), "FP32")], request_id=rid
            )
        order = []
        for _ in range(2):
            result, error = results.get(timeout=20)
            assert error is None, error
            order.append(result.get_response().id)
    finally:
        client.stop_stream()
    assert order == ["fast", "slow"]


def test_stream_error_keeps_stream_open(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "no_such_model", [tensor("COUNT", np.array([1], np.int32), "INT32")], request_id="bad"
        )
        first = results.get(timeout=20)
        client.async_stream_infer("repeat", [tensor("COUNT", np.array([1], np.int32), "INT32")], request_id="good")
        second = results.get(timeout=20)
    finally:
        client.stop_stream()
    assert first[0] is None and "no_such_model" in first[1].message()
    assert second[1] is None and second[0].get_response().id == "good"


def _stream_with_grpc_error(client: grpcclient.InferenceServerClient, model: str, inputs: list[Any]) -> Any:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: results.put((result, error)), headers={"triton_grpc_error": "true"}
    )
    try:
        client.async_stream_infer(model, inputs)
        result, error = results.get(timeout=20)
    finally:
        client.stop_stream()
    assert result is None
    return error


def test_stream_grpc_error_header_ends_stream(client: grpcclient.InferenceServerClient) -> None:
    """With ``triton_grpc_error: true`` an error ends the stream with its status, as in Triton."""
    error = _stream_with_grpc_error(client, "fail", [tensor("INPUT0", np.array([-1], np.float32), "FP32")])
    assert error.status() == "StatusCode.INTERNAL"
    assert "negative input is refused" in error.message()
    # Triton 2.51 still answers an unknown model in-band here; inferd ends the stream consistently.
    error = _stream_with_grpc_error(client, "no_such_model", [tensor("COUNT", np.array([1], np.int32), "INT32")])
    assert error.status() == "StatusCode.NOT_FOUND"
    assert_healthy(client)


def test_decoupled_stream_empty_final_response(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "repeat",
            [tensor("COUNT", np.array([2], np.int32), "INT32")],
            request_id="f",
            enable_empty_final_response=True,
        )
        items = [results.get(timeout=20) for _ in range(3)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in items)
    responses = [result.get_response() for result, _ in items]
    assert [r.parameters["triton_final_response"].bool_param for r in responses] == [False, False, True]
    assert [len(r.outputs) for r in responses] == [1, 1, 0]
    assert all(r.id == "f" for r in responses)


def test_decoupled_last_response_flagged_final(client: grpcclient.InferenceServerClient) -> None:
    """A model that flags its last response FINAL gets it marked final, with no extra empty one."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "repeat",
            [tensor("COUNT", np.array([-2], np.int32), "INT32")],
            request_id="g",
            enable_empty_final_response=True,
        )
        items = [results.get(timeout=20) for _ in range(2)]
        time.sleep(0.3)
        assert results.empty()
    finally:
        client.stop_stream()
    responses = [result.get_response() for result, _ in items]
    assert [r.parameters["triton_final_response"].bool_param for r in responses] == [False, True]
    assert [len(r.outputs) for r in responses] == [1, 1]


def test_decoupled_stream_aio(server: ServerProcess) -> None:
    async def run() -> list[tuple[str, int]]:
        async with grpcclient_aio.InferenceServerClient(server.grpc_url) as aio_client:

            async def requests() -> Any:
                for rid in ("first", "second"):
                    t = grpcclient_aio.InferInput("COUNT", [1], "INT32")
                    t.set_data_from_numpy(np.array([3], np.int32))
                    yield {"model_name": "repeat", "inputs": [t], "request_id": rid}

            out = []
            stream = aio_client.stream_infer(requests())
            async for result, error in stream:
                assert error is None, error
                out.append((result.get_response().id, int(result.as_numpy("INDEX")[0])))
                if len(out) == 6:
                    stream.cancel()
                    break
            return out

    out = asyncio.run(asyncio.wait_for(run(), 30))
    for rid in ("first", "second"):
        assert [i for r, i in out if r == rid] == [0, 1, 2]


# -- repository control (explicit mode) -----------------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(serve: Servers, transport: list[str]) -> Iterator[ServerProcess]:
    models = {name: MODELS[name] for name in ("add_sub", "types")}
    with serve(models, "--model-control-mode=explicit", "--load-model=add_sub", *transport) as srv:
        yield srv


def test_repository_index_load_unload(explicit_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(explicit_server.grpc_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["add_sub"]["state"] == "READY"
        assert index["types"].get("state", "") != "READY"
        assert not client.is_model_ready("types")

        client.load_model("types")
        assert client.is_model_ready("types")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["types"]["state"] == "READY"

        client.unload_model("types")
        assert not client.is_model_ready("types")
        ready = client.get_model_repository_index(as_json=True)["models"]
        assert {m["name"] for m in ready if m.get("state") == "READY"} == {"add_sub"}

        with pytest.raises(InferenceServerException) as info:
            client.load_model("no_such_model")
        assert "no_such_model" in info.value.message()
        assert client.is_server_ready()


def test_load_with_config_override(explicit_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(explicit_server.grpc_url) as client:
        config = json.dumps(
            {
                "name": "add_sub",
                "backend": "python",
                "max_batch_size": 4,
                "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("INPUT0", "INPUT1")],
                "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("OUTPUT0", "OUTPUT1")],
            }
        )
        client.load_model("add_sub", config=config)
        assert client.get_model_config("add_sub").config.max_batch_size == 4
        a = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(
            client.infer("add_sub", add_sub_inputs(grpcclient, a, a)).as_numpy("OUTPUT0"), a + a
        )


# -- shutdown -------------------------------------------------------------------------------------


def test_shutdown_answers_in_flight_stream_requests_then_closes(tmp_path: Path, transport: list[str]) -> None:
    """SIGTERM with a stream open: its in-flight request is answered, then the stream ends cleanly."""
    repo = write_repository(tmp_path / "models", {"sleep": MODELS["sleep"]})
    proc = ServerProcess([repo], transport).start()
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(proc.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("sleep", [tensor("SECONDS", np.array([0.0], np.float32), "FP32")], request_id="warm")
        assert results.get(timeout=20)[1] is None
        client.async_stream_infer("sleep", [tensor("SECONDS", np.array([1.0], np.float32), "FP32")], request_id="late")
        time.sleep(0.3)
        started = time.monotonic()
        assert proc.stop() == 0
        assert time.monotonic() - started < 10
        result, error = results.get(timeout=5)
        assert error is None and result.get_response().id == "late"
    finally:
        client.stop_stream()
        client.close()
        proc.stop()
