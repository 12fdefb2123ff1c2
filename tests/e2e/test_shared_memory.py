"""The system and CUDA shared-memory extensions end to end: a real ``inferd serve``, tritonclient
HTTP and gRPC, and regions made with ``tritonclient.utils.shared_memory``.

Every status code and message asserted here is what the real Triton 2.51 answered for the same
request (inferd's hints follow Triton's sentence after '; ').
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from inferd.shared_memory.cuda import unusable_reason
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.http_calls import http_call
from tests.python_models import python_model, source
from tests.servers import Servers
from tests.triton_clients import error_of

SLOW_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
# ORIGIN = the type of the object whose memory the model's input array is (no copy: "mmap").
ORIGIN_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "ORIGIN" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ORIGIN_PY = source("shared_memory_origin")
# Touches MARKER when it starts executing, then takes a second.
SLOW_PY = """
import pathlib
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pathlib.Path({marker!r}).touch()
        time.sleep(1.0)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y",
                pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
"""
A = np.array([[1.5, 2.0, -3.0, 4.25]], np.float32)
B = np.array([[0.5, 1.0, 1.0, -0.25]], np.float32)
_names = itertools.count()


@pytest.fixture(scope="module")
def marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marker") / "slow-started"


@pytest.fixture(scope="module")
def server(marker: Path, serve: Servers) -> ServerProcess:
    repo = {
        "add_sub": models.add_sub(),
        "identity": python_model("string_identity"),
        "origin": models.simple(ORIGIN_CONFIG, ORIGIN_PY),
        "slow": models.simple(SLOW_CONFIG, SLOW_PY.format(marker=str(marker))),
        "cached": models.add_sub(config=models.ADD_SUB_CONFIG + "response_cache { enable: true }\n"),
    }
    return serve(repo, "--cache-config", "local,size=1048576")


Client = httpclient.InferenceServerClient | grpcclient.InferenceServerClient


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(server: ServerProcess, protocol: str) -> Iterator[Client]:
    c: Client
    if protocol == "http":
        c = httpclient.InferenceServerClient(server.http_url)
    else:
        c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture
def region() -> Iterator[Callable[[int], tuple[str, str, Any]]]:
    """Makes ``/dev/shm`` objects: ``region(size) -> (name, key, handle)``; all removed after."""
    made: list[Any] = []

    def make(size: int) -> tuple[str, str, Any]:
        n = next(_names)
        name, key = f"r{n}", f"/inferd_test_{os.getpid()}_{n}"
        made.append(shm.create_shared_memory_region(name, key, size))
        return name, key, made[-1]

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def mod(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def add_sub_request(protocol: str, in_name: str, out_name: str | None, out_size: int = 16, in_size: int = 16,
                    in_offsets: tuple[int, int] = (0, 16), both: bool = True) -> tuple[list[Any], list[Any]]:  # fmt: skip
    """INPUT0/INPUT1 from ``in_name`` at ``in_offsets``; OUTPUT0 (and with ``both`` OUTPUT1 after
    it) into ``out_name``; outputs not in a region come in the response."""
    m = mod(protocol)
    inputs = [m.InferInput("INPUT0", [1, 4], "FP32"), m.InferInput("INPUT1", [1, 4], "FP32")]
    for tensor, offset in zip(inputs, in_offsets, strict=True):
        tensor.set_shared_memory(in_name, in_size, offset)
    outputs = [m.InferRequestedOutput("OUTPUT0"), m.InferRequestedOutput("OUTPUT1")]
    if out_name is not None:
        outputs[0].set_shared_memory(out_name, out_size)
        if both:
            outputs[1].set_shared_memory(out_name, out_size, offset=16)
    return inputs, outputs


def registered_pair(client: Client, region: Callable[[int], tuple[str, str, Any]]) -> tuple[str, str, Any]:
    """An input region holding A then B and an output region, both registered."""
    in_name, in_key, in_handle = region(32)
    shm.set_shared_memory_region(in_handle, [A, B])
    client.register_system_shared_memory(in_name, in_key, 32)
    out_name, out_key, out_handle = region(64)
    client.register_system_shared_memory(out_name, out_key, 64)
    return in_name, out_name, out_handle


def run(client: Client, request: tuple[list[Any], list[Any]]) -> Any:
    return client.infer("add_sub", request[0], outputs=request[1])


def expect(protocol: str, http_status: str, grpc_code: str) -> str:
    return http_status if protocol == "http" else f"StatusCode.{grpc_code}"


# -- register, status, unregister ------------------------------------------------------------------


def test_register_status_unregister(client: Client, protocol: str, region: Any) -> None:
    name, key, _ = region(64)
    other, other_key, _ = region(16)
    client.register_system_shared_memory(name, key, 48, offset=8)
    client.register_system_shared_memory(other, other_key, 16)
    status = client.get_system_shared_memory_status(as_json=True) if protocol == "grpc" else \
        client.get_system_shared_memory_status()  # fmt: skip
    if protocol == "http":
        assert sorted(status, key=lambda r: r["name"]) == [
            {"name": name, "key": key, "offset": 8, "byte_size": 48},
            {"name": other, "key": other_key, "offset": 0, "byte_size": 16},
        ]
        assert client.get_system_shared_memory_status(name) == [
            {"name": name, "key": key, "offset": 8, "byte_size": 48}
        ]
    else:
        assert status["regions"][name] == {"name": name, "key": key, "offset": "8", "byte_size": "48"}
        assert set(status["regions"]) == {name, other}
    client.unregister_system_shared_memory(name)
    client.unregister_system_shared_memory("never-registered")  # no error, as in Triton
    remaining = client.get_system_shared_memory_status()
    assert [r["name"] for r in remaining] == [other] if protocol == "http" else list(remaining.regions) == [other]
    client.unregister_system_shared_memory()
    assert len(client.get_system_shared_memory_status() if protocol == "http" else
               client.get_system_shared_memory_status().regions) == 0  # fmt: skip


def test_register_errors(client: Client, protocol: str, region: Any) -> None:
    name, key, _ = region(64)
    client.register_system_shared_memory(name, key, 64)
    assert error_of(lambda: client.register_system_shared_memory(name, key, 64)) == (
        expect(protocol, "400", "ALREADY_EXISTS"),
        f"shared memory region '{name}' already in manager",
    )
    status, message = error_of(lambda: client.register_system_shared_memory("big", key, 65))
    assert status == expect(protocol, "400", "INVALID_ARGUMENT")
    assert message.startswith("failed to register shared memory region 'big': invalid args; ")
    status, message = error_of(lambda: client.register_system_shared_memory("past", key, 8, offset=60))
    assert message.startswith("failed to register shared memory region 'past': invalid args")
    status, message = error_of(lambda: client.register_system_shared_memory("nokey", "/inferd_no_such_key", 8))
    assert status == expect(protocol, "500", "INTERNAL")
    assert message.startswith("Unable to open shared memory region: '/inferd_no_such_key'")
    status, message = error_of(lambda: client.register_system_shared_memory("escape", "/../etc/passwd", 8))
    assert message.startswith("Unable to open shared memory region: '/../etc/passwd'")
    assert error_of(lambda: client.get_system_shared_memory_status("nope")) == (
        expect(protocol, "404", "NOT_FOUND"),
        "Unable to find system shared memory region: 'nope'",
    )
    assert (
        [r["name"] for r in client.get_system_shared_memory_status(as_json=True)["regions"].values()] == [name]
        if protocol == "grpc"
        else [r["name"] for r in client.get_system_shared_memory_status()] == [name]
    )


def _http(server: ServerProcess, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return http_call(f"http://{server.http_url}{path}", method, data, timeout=10)


def test_http_routes_and_bodies(server: ServerProcess, region: Any) -> None:
    name, key, _ = region(16)
    base = "/v2/systemsharedmemory"
    assert _http(server, "POST", f"{base}/status") == (405, b'{"error":"Method Not Allowed"}')
    assert _http(server, "GET", f"{base}/region/{name}/register") == (405, b'{"error":"Method Not Allowed"}')
    assert _http(server, "POST", f"{base}/region/{name}/register", {"key": key}) == (
        400,
        b'{"error":"Shared memory register request has no \'byte_size\' field"}',
    )
    assert _http(server, "POST", f"{base}/region/{name}/register", {"byte_size": 8}) == (
        400,
        b'{"error":"Shared memory register request has no \'key\' field"}',
    )
    status, body = _http(server, "POST", f"{base}/region/{name}/register", {"key": key, "byte_size": -8})
    assert status == 400 and b"'byte_size' must be an unsigned integer" in body
    assert _http(server, "POST", f"{base}/region/{name}/register", {"key": key, "byte_size": 16}) == (200, b"")
    assert json.loads(_http(server, "GET", f"{base}/region/{name}/status")[1]) == [
        {"name": name, "key": key, "offset": 0, "byte_size": 16}
    ]
    assert _http(server, "POST", f"{base}/unregister") == (200, b"")
    assert _http(server, "GET", f"{base}/status") == (200, b"[]")


# -- inference ------------------------------------------------------------------------------------


def test_infer_inputs_and_outputs_in_regions(client: Client, protocol: str, region: Any) -> None:
    in_name, out_name, out_handle = registered_pair(client, region)
    inputs, outputs = add_sub_request(protocol, in_name, out_name)
    result = client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 4]), A + B)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 4], offset=16), A - B)
    response = result.get_response() if protocol == "http" else result.get_response(as_json=True)
    assert [(o["name"], o["datatype"], [int(d) for d in o["shape"]]) for o in response["outputs"]] == [
        ("OUTPUT0", "FP32", [1, 4]),
        ("OUTPUT1", "FP32", [1, 4]),
    ]
    assert all("data" not in o and "parameters" not in o for o in response["outputs"])


def test_an_input_reaches_the_model_uncopied(client: Client, protocol: str, region: Any) -> None:
    name, key, handle = region(16)
    shm.set_shared_memory_region(handle, [A.reshape(4)])
    client.register_system_shared_memory(name, key, 16)
    m = mod(protocol)
    x = m.InferInput("X", [4], "FP32")
    x.set_shared_memory(name, 16)
    assert client.infer("origin", [x]).as_numpy("ORIGIN")[0] == b"mmap"  # a view of the server's mapping
    wire = m.InferInput("X", [4], "FP32")
    wire.set_data_from_numpy(A.reshape(4))
    assert client.infer("origin", [wire]).as_numpy("ORIGIN")[0] != b"mmap"


def test_inputs_follow_the_region_contents(client: Client, protocol: str, region: Any) -> None:
    in_name, in_key, in_handle = region(32)
    client.register_system_shared_memory(in_name, in_key, 32)
    for scale in (1.0, 3.0):
        shm.set_shared_memory_region(in_handle, [A * scale, B])
        result = run(client, add_sub_request(protocol, in_name, None))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * scale + B)


def test_mixed_shared_memory_and_wire_tensors(client: Client, protocol: str, region: Any) -> None:
    in_name, out_name, out_handle = registered_pair(client, region)
    m = mod(protocol)
    first = m.InferInput("INPUT0", [1, 4], "FP32")
    first.set_shared_memory(in_name, 16)
    second = m.InferInput("INPUT1", [1, 4], "FP32")
    second.set_data_from_numpy(A)
    out0 = m.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory(out_name, 16, offset=32)
    result = client.infer("add_sub", [first, second], outputs=[out0, m.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 4], offset=32), A + A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - A)


def test_grpc_stream_with_regions(server: ServerProcess, region: Any) -> None:
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        in_name, out_name, out_handle = registered_pair(client, region)
        client.start_stream(lambda result, error: results.put(error or result))
        inputs, outputs = add_sub_request("grpc", in_name, out_name)
        client.async_stream_infer("add_sub", inputs, outputs=outputs, request_id="s1")
        inputs, outputs = add_sub_request("grpc", "nope", out_name)
        client.async_stream_infer("add_sub", inputs, outputs=outputs, request_id="s2")
        got = [results.get(timeout=30), results.get(timeout=30)]  # a stream's requests run at once: any order
        client.stop_stream()
        second, first = sorted(got, key=lambda r: not isinstance(r, InferenceServerException))
        assert first.get_response().id == "s1"
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 4], offset=16), A - B)
        assert isinstance(second, InferenceServerException)
        assert "Unable to find shared memory region: 'nope'" in second.message()
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_bytes_tensors_in_regions(client: Client, protocol: str, region: Any) -> None:
    words = np.array([b"shared", b"", b"memory \xe2\x9c\x93"], dtype=np.object_)
    wire = serialize_byte_tensor(words)
    size = len(wire.item())
    in_name, in_key, in_handle = region(size)
    shm.set_shared_memory_region(in_handle, [wire])
    out_name, out_key, out_handle = region(size)
    client.register_system_shared_memory(in_name, in_key, size)
    client.register_system_shared_memory(out_name, out_key, size)
    m = mod(protocol)
    tensor = m.InferInput("INPUT", [3], "BYTES")
    tensor.set_shared_memory(in_name, size)
    out = m.InferRequestedOutput("OUTPUT")
    out.set_shared_memory(out_name, size)
    client.infer("identity", [tensor], outputs=[out])
    assert list(shm.get_contents_as_numpy(out_handle, np.object_, [3])) == list(words)


def test_a_cache_hit_is_written_into_the_region_asked_for(client: Client, protocol: str, region: Any) -> None:
    in_name, in_key, in_handle = region(32)
    shm.set_shared_memory_region(in_handle, [A, B])
    client.register_system_shared_memory(in_name, in_key, 32)
    handles = []
    for _ in range(2):  # the same inputs, another output region: a hit, written where asked
        out_name, out_key, out_handle = region(32)
        client.register_system_shared_memory(out_name, out_key, 32)
        inputs, outputs = add_sub_request(protocol, in_name, out_name)
        client.infer("cached", inputs, outputs=outputs)
        handles.append(out_handle)
    for handle in handles:
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 4]), A + B)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 4], offset=16), A - B)
    kw = {"as_json": True} if protocol == "grpc" else {}
    stats = client.get_inference_statistics("cached", **kw)["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) >= 1


def test_infer_errors_leave_the_server_up(client: Client, protocol: str, region: Any) -> None:
    in_name, out_name, _ = registered_pair(client, region)
    small, small_key, _ = region(8)
    client.register_system_shared_memory(small, small_key, 8)
    bad = expect(protocol, "400", "INVALID_ARGUMENT")
    cases = [
        (add_sub_request(protocol, in_name, out_name, in_offsets=(0, 24)), bad,
         f"Invalid offset + byte size for shared memory region: '{in_name}'"),
        (add_sub_request(protocol, in_name, out_name, in_offsets=(0, 32)), bad,
         f"Invalid offset for shared memory region: '{in_name}'"),
        (add_sub_request(protocol, in_name, out_name, in_size=12), bad,
         "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12"),
        (add_sub_request(protocol, in_name, small, out_size=8, both=False), expect(protocol, "500", "INTERNAL"),
         "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) should be at least 16 bytes "
         "to hold the results"),
        (add_sub_request(protocol, "nope", out_name), expect(protocol, "404", "NOT_FOUND"),
         "Unable to find shared memory region: 'nope'"),
        (add_sub_request(protocol, in_name, "nope"), expect(protocol, "404", "NOT_FOUND"),
         "Unable to find shared memory region: 'nope'"),
    ]  # fmt: skip
    for request, status, sentence in cases:
        got_status, message = error_of(lambda r=request: run(client, r))  # type: ignore[misc]
        assert (got_status, message.split("; ")[0]) == (status, sentence)
    result = run(client, add_sub_request(protocol, in_name, None))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_unregister_under_a_request_in_flight(server: ServerProcess, region: Any, marker: Path) -> None:
    """The request completes with its regions (Triton 2.51 refuses the unregistration instead)."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    in_name, in_key, in_handle = region(16)
    out_name, out_key, out_handle = region(16)
    shm.set_shared_memory_region(in_handle, [A.reshape(4)])
    client.register_system_shared_memory(in_name, in_key, 16)
    client.register_system_shared_memory(out_name, out_key, 16)
    x = httpclient.InferInput("X", [4], "FP32")
    x.set_shared_memory(in_name, 16)
    y = httpclient.InferRequestedOutput("Y")
    y.set_shared_memory(out_name, 16)
    marker.unlink(missing_ok=True)
    pending = client.async_infer("slow", [x], outputs=[y])
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:  # the model runs with the input read
        gevent.sleep(0.01)  # the client's greenlet sends the request while the hub has control
    other = httpclient.InferenceServerClient(server.http_url)
    other.unregister_system_shared_memory()
    assert other.get_system_shared_memory_status() == []
    pending.get_result()
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [4]), A.reshape(4) * 2)
    client.close()
    other.close()


def test_http_parameter_errors(server: ServerProcess, region: Any) -> None:
    name, key, _ = region(32)
    assert (
        _http(server, "POST", f"/v2/systemsharedmemory/region/{name}/register", {"key": key, "byte_size": 32})[0] == 200
    )
    data = {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}

    def infer(first: dict[str, Any], outputs: list[Any] | None = None) -> tuple[int, str]:
        body: dict[str, Any] = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], **first}, data]}
        if outputs:
            body["outputs"] = outputs
        status, reply = _http(server, "POST", "/v2/models/add_sub/infer", body)
        return status, json.loads(reply).get("error", "")

    in_shm = {"parameters": {"shared_memory_region": name, "shared_memory_byte_size": 16}}
    assert infer({**in_shm, "data": [1, 2, 3, 4]}) == (
        400,
        (
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region'"
        ),
    )
    assert infer({"parameters": {"shared_memory_region": 3}})[1].startswith("Unable to parse 'shared_memory_region'")
    assert infer({"parameters": {"shared_memory_region": name, "shared_memory_offset": -4}})[1].startswith(
        "Unable to parse 'shared_memory_offset'"
    )
    out = {"name": "OUTPUT0", "parameters": {"shared_memory_region": name, "shared_memory_byte_size": 16,
                                             "binary_data": True}}  # fmt: skip
    assert infer({"data": [1, 2, 3, 4]}, [out]) == (
        400,
        "Output can't set both 'shared_memory_region' and 'binary_data'",
    )
    assert _http(server, "POST", "/v2/systemsharedmemory/unregister")[0] == 200


# -- CUDA shared memory without a GPU ---------------------------------------------------------------


@pytest.mark.skipif(
    unusable_reason() is None, reason="CUDA shared memory works here: test_cuda_inputs_and_outputs_on_the_gpu covers it"
)
def test_cuda_without_a_gpu(client: Client, protocol: str, server: ServerProcess) -> None:
    assert (
        "cuda_shared_memory"
        not in client.get_server_metadata(**({"as_json": True} if protocol == "grpc" else {}))["extensions"]
    )
    assert (
        "system_shared_memory"
        in client.get_server_metadata(**({"as_json": True} if protocol == "grpc" else {}))["extensions"]
    )
    status = client.get_cuda_shared_memory_status()
    assert (status == []) if protocol == "http" else (len(status.regions) == 0)
    status, message = error_of(lambda: client.register_cuda_shared_memory("gpu", base64.b64encode(b"\x01" * 64), 0, 16))
    assert status == expect(protocol, "400", "INVALID_ARGUMENT")
    assert message.startswith("failed to register CUDA shared memory region: 'gpu', GPUs not supported; ")
    assert error_of(lambda: client.get_cuda_shared_memory_status("gpu")) == (
        expect(protocol, "404", "NOT_FOUND"),
        "Unable to find cuda shared memory region: 'gpu'",
    )
    client.unregister_cuda_shared_memory("gpu")
    client.unregister_cuda_shared_memory()


def test_http_cuda_handle_must_be_base64(server: ServerProcess) -> None:
    status, body = _http(server, "POST", "/v2/cudasharedmemory/region/c/register",
                         {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8})  # fmt: skip
    assert (status, json.loads(body)) == (
        400,
        {"error": "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"},
    )


def test_status_kinds_are_apart(client: Client, protocol: str, region: Any) -> None:
    name, key, _ = region(16)
    client.register_system_shared_memory(name, key, 16)
    assert error_of(lambda: client.get_cuda_shared_memory_status(name)) == (
        expect(protocol, "404", "NOT_FOUND"),
        f"The region named '{name}' is registered as system shared memory, not CUDA shared memory",
    )
    client.unregister_cuda_shared_memory(name)  # a CUDA unregister leaves system regions alone
    assert name in str(client.get_system_shared_memory_status())


def test_repository_path_is_not_a_key(server: ServerProcess, tmp_path: Path) -> None:
    """A key names an object in /dev/shm only: absolute file paths elsewhere are refused."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 16)
    status, body = _http(server, "POST", "/v2/systemsharedmemory/region/s/register",
                         {"key": f"/..{secret}", "byte_size": 16})  # fmt: skip
    assert status == 500 and json.loads(body)["error"].startswith("Unable to open shared memory region")


# -- CUDA shared memory on a GPU ------------------------------------------------------------------


@pytest.mark.skipif(unusable_reason() is not None, reason=f"needs a GPU and cuda-python: {unusable_reason()}")
def test_cuda_inputs_and_outputs_on_the_gpu(client: Client, protocol: str) -> None:
    import tritonclient.utils.cuda_shared_memory as cudashm

    as_json = {"as_json": True} if protocol == "grpc" else {}
    assert "cuda_shared_memory" in client.get_server_metadata(**as_json)["extensions"]
    inp = cudashm.create_shared_memory_region("gpu_in", 32, 0)
    out = cudashm.create_shared_memory_region("gpu_out", 32, 0)
    try:
        cudashm.set_shared_memory_region(inp, [A, B])
        client.register_cuda_shared_memory("gpu_in", cudashm.get_raw_handle(inp), 0, 32)
        client.register_cuda_shared_memory("gpu_out", cudashm.get_raw_handle(out), 0, 32)
        status = client.get_cuda_shared_memory_status("gpu_in", **as_json)
        entry = status[0] if protocol == "http" else status["regions"]["gpu_in"]
        assert (entry["name"], int(entry["byte_size"])) == ("gpu_in", 32)
        run(client, add_sub_request(protocol, "gpu_in", "gpu_out"))
        got = cudashm.get_contents_as_numpy(out, np.float32, [2, 4])
        np.testing.assert_array_equal(got, np.concatenate([A + B, A - B]))
        small = add_sub_request(protocol, "gpu_in", "gpu_out", out_size=8, both=False)
        assert error_of(lambda: run(client, small))[0] == expect(protocol, "500", "INTERNAL")
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(inp)
        cudashm.destroy_shared_memory_region(out)


# -- --allow-client-shm (Triton 2.69+) --------------------------------------------------------------

SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


def test_allow_client_shm_false_refuses_register_and_unregister(tmp_path: Path, region: Any) -> None:
    root = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    name, key, handle = region(32)
    shm.set_shared_memory_region(handle, [A, B])
    with ServerProcess([root], ["--allow-client-shm=false"]) as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        gpu_handle = base64.b64encode(b"\x01" * 64)
        for protocol, c in (("http", http), ("grpc", grpc)):
            calls: list[Callable[[], Any]] = [
                lambda c=c: c.register_system_shared_memory(name, key, 32),
                lambda c=c: c.unregister_system_shared_memory(name),
                lambda c=c: c.unregister_system_shared_memory(),
                lambda c=c: c.register_cuda_shared_memory("gpu", gpu_handle, 0, 16),
                lambda c=c: c.unregister_cuda_shared_memory(),
            ]
            for call in calls:  # Triton's UNSUPPORTED: 501 / UNIMPLEMENTED, before anything else is checked
                assert error_of(call) == (expect(protocol, "501", "UNIMPLEMENTED"), SHM_DISABLED)
            status = c.get_system_shared_memory_status()
            assert (status == []) if protocol == "http" else (len(status.regions) == 0)
        # the body is not read first: a broken one gets the same answer
        code, body = _http(srv, "POST", f"/v2/systemsharedmemory/region/{name}/register", b"{not json")
        assert (code, json.loads(body)) == (501, {"error": SHM_DISABLED})
        # a request naming a region finds none; tensors on the wire still work
        status, message = error_of(lambda: run(http, add_sub_request("http", name, None)))
        assert (status, message) == ("404", f"Unable to find shared memory region: '{name}'")
        x, y = httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")
        x.set_data_from_numpy(A)
        y.set_data_from_numpy(B)
        np.testing.assert_array_equal(http.infer("add_sub", [x, y]).as_numpy("OUTPUT0"), A + B)
        http.close()
        grpc.close()
    with ServerProcess([root], ["--allow-client-shm=true"]) as srv:  # explicit true: Triton 2.51's behaviour
        for c in (httpclient.InferenceServerClient(srv.http_url), grpcclient.InferenceServerClient(srv.grpc_url)):
            c.register_system_shared_memory(name, key, 32)
            c.unregister_system_shared_memory(name)
            c.close()
