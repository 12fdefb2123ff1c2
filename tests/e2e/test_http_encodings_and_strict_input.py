"""HTTP as Triton reads and writes it, end to end: compressed responses, raw binary request bodies, and
JSON / parameters read without silent coercion, against a real ``inferd serve``.

The expected sentences are the ones the real Triton 2.51 answered to the same requests.
"""

from __future__ import annotations

import gzip
import http.client
import json
import zlib

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers

# Echoes every input to the output of the same position (configs below name them IN0 -> OUT0).
IDENTITY_PY = """
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor(out, pb_utils.get_input_tensor_by_name(r, inp).as_numpy()) for inp, out in self.names
        ]) for r in requests]
"""


def identity(datatype: str, dims: str, max_batch_size: int = 0) -> dict[str, str]:
    config = f"""
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "IN0" data_type: {datatype} dims: {dims} }} ]
output [ {{ name: "OUT0" data_type: {datatype} dims: {dims} }} ]
"""
    return models.simple(config, IDENTITY_PY)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "i32": identity("TYPE_INT32", "[ -1 ]"),
        "batched": identity("TYPE_INT32", "[ 2 ]", max_batch_size=8),
        "grid": identity("TYPE_FP32", "[ 2, 3 ]"),
        "flags": identity("TYPE_BOOL", "[ -1 ]"),
        "text": identity("TYPE_STRING", "[ 1 ]"),
        "add_sub": models.add_sub(),
    }
    return serve(repo)


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def post(server, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("POST", path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def i32_body(values: list[object], **fields: object) -> bytes:
    return json.dumps({"inputs": [{"name": "IN0", "datatype": "INT32", "shape": [len(values)], "data": values}],
                       **fields}).encode()  # fmt: skip


def error_of(server, model: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, str]:
    status, _, data = post(server, f"/v2/models/{model}/infer", body, headers)
    return status, json.loads(data)["error"]


# -- compressed responses ------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_reads_compressed_responses(client, algorithm, binary):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [2, 4], "FP32"), httpclient.InferInput("INPUT1", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs, response_compression_algorithm=algorithm,
                          request_compression_algorithm=algorithm)  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# (Accept-Encoding, the Content-Encoding Triton 2.51 answered with; None: uncompressed)
ACCEPT_CASES = [
    ("gzip", "gzip"),
    ("deflate", "deflate"),
    ("gzip;q=0", None),
    ("deflate;q=0.5, gzip;q=1.0", "gzip"),
    ("gzip, deflate", "gzip"),
    ("deflate, gzip", "deflate"),
    ("gzip;q=0.5, deflate;q=0.5", "gzip"),
    ("br", None),
    ("identity", None),
    ("*", None),
    ("GZIP", None),
]


@pytest.mark.parametrize(("accept", "coding"), ACCEPT_CASES)
def test_accept_encoding_is_read_as_triton_reads_it(server, accept, coding):
    body = i32_body([1, 2, 3])
    status, headers, data = post(server, "/v2/models/i32/infer", body, {"Accept-Encoding": accept})
    assert status == 200
    assert headers.get("content-encoding") == coding
    assert int(headers["content-length"]) == len(data)
    plain = {"gzip": gzip.decompress, "deflate": zlib.decompress, None: bytes}[coding](data)
    assert json.loads(plain)["outputs"][0]["data"] == [1, 2, 3]


def test_binary_response_is_compressed_whole_with_the_uncompressed_header_length(server):
    body = i32_body([7, 8, 9], parameters={"binary_data_output": True})
    status, headers, data = post(server, "/v2/models/i32/infer", body, {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["content-type"] == "application/octet-stream"
    plain = gzip.decompress(data)
    n = int(headers["inference-header-content-length"])
    assert json.loads(plain[:n])["outputs"][0]["parameters"] == {"binary_data_size": 12}
    assert np.frombuffer(plain[n:], dtype=np.int32).tolist() == [7, 8, 9]


def test_errors_and_plain_requests_are_not_compressed(server):
    status, headers, _ = post(server, "/v2/models/i32/infer", i32_body([1.5]), {"Accept-Encoding": "gzip"})
    assert status == 400 and "content-encoding" not in headers
    status, headers, _ = post(server, "/v2/models/i32/infer", i32_body([1]))
    assert status == 200 and "content-encoding" not in headers


@pytest.mark.parametrize("encoding", ["br", "compress", "gzip, identity"])
def test_unsupported_request_encoding_is_501_with_the_accepted_list(server, encoding):
    status, headers, data = post(server, "/v2/models/i32/infer", i32_body([1]), {"Content-Encoding": encoding})
    assert status == 501
    assert headers["accept-encoding"] == "gzip, deflate"
    assert json.loads(data)["error"].startswith("Unsupported compression type (")
    assert post(server, "/v2/models/i32/infer", i32_body([1]), {"Content-Encoding": "identity"})[0] == 200


# -- raw binary request bodies ---------------------------------------------------------------------

RAW = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}


def raw_infer(server, model: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[dict, bytes]:
    status, got, data = post(server, f"/v2/models/{model}/infer", body, {**RAW, **(headers or {})})
    assert status == 200, data
    assert got["content-type"] == "application/octet-stream"
    n = int(got["inference-header-content-length"])
    return json.loads(data[:n]), data[n:]


@pytest.mark.parametrize(
    ("model", "array", "shape"),
    [
        ("i32", np.array([1, 2, 3], dtype=np.int32), [3]),
        ("batched", np.array([4, 5], dtype=np.int32), [1, 2]),
        ("grid", np.arange(6, dtype=np.float32), [2, 3]),
        ("flags", np.array([True, False, True]), [3]),
    ],
)
def test_raw_body_feeds_the_only_input_and_answers_binary(server, model, array, shape):
    header, tail = raw_infer(server, model, array.tobytes())
    (out,) = header["outputs"]
    assert out["name"] == "OUT0" and out["shape"] == shape
    assert out["parameters"] == {"binary_data_size": array.nbytes}
    assert tail == array.tobytes()


def test_raw_body_of_a_bytes_model_is_one_element(server):
    header, tail = raw_infer(server, "text", b"hello raw")
    assert header["outputs"][0]["shape"] == [1]
    assert tail == len(b"hello raw").to_bytes(4, "little") + b"hello raw"


def test_raw_body_may_be_compressed(server):
    body = gzip.compress(np.array([9, 8], dtype=np.int32).tobytes())
    _, tail = raw_infer(server, "i32", body, {"Content-Encoding": "gzip"})
    assert np.frombuffer(tail, dtype=np.int32).tolist() == [9, 8]


def test_raw_body_errors_say_what_triton_says(server):
    status, message = error_of(server, "add_sub", b"\0" * 16, RAW)
    assert status == 400
    assert message.startswith(
        "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'add_sub' model configuration"
    )
    status, message = error_of(server, "batched", np.arange(3, dtype=np.int32).tobytes(), RAW)
    assert status == 400
    assert message.startswith("input byte size mismatch for input 'raw_input' for model 'batched'. Expected 8, got 12")
    assert "input 'IN0', shape [1, 2] of INT32" in message
    status, message = error_of(server, "i32", b"\0", {"Inference-Header-Content-Length": "-1"})
    assert (status, message) == (400, "inference header size should be in range (0, 1), got: -1")


# -- JSON data of the wrong kind -------------------------------------------------------------------

SIGNED = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
BOOLEAN = "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
STRING = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
NUMBER = "Unable to parse 'data': attempt to access JSON non-number as double"
SHAPE = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def tensor_body(datatype: str, shape: list[int], data: object) -> bytes:
    return json.dumps({"inputs": [{"name": "IN0", "datatype": datatype, "shape": shape, "data": data}]}).encode()


@pytest.mark.parametrize(
    ("model", "datatype", "shape", "data", "first", "detail"),
    [
        ("i32", "INT32", [2], [1, 1.5], SIGNED, "data[1] is 1.5"),
        ("i32", "INT32", [2], [2.0, 1], SIGNED, "data[0] is 2.0"),
        ("i32", "INT32", [2], [1, True], SIGNED, "data[1] is true"),
        ("i32", "INT32", [2], [1, "2"], SIGNED, 'data[1] is "2"'),
        ("flags", "BOOL", [2], [True, 2], BOOLEAN, "data[1] is 2"),
        ("flags", "BOOL", [2], ["x", True], BOOLEAN, 'data[0] is "x"'),
        ("text", "BYTES", [1], [5], STRING, "data[0] is 5"),
        ("grid", "FP32", [2, 3], [1, 2, 3, 4, 5, True], NUMBER, "data[5] is true"),
        ("grid", "FP32", [2, 3], [[1, 2, 3], [4, None, 6]], NUMBER, "data[1][1] is null"),
        ("grid", "FP32", [2, 3], [[1, 2], [3, 4], [5, 6]], SHAPE, "data should be a list of 2 elements, got 3"),
        ("grid", "FP32", [2, 3], [[1, 2, 3, 4], [5, 6]], SHAPE, "data[0] should be a list of 3 elements, got 4"),
        ("i32", "INT32", [2], [[1], [2]], SIGNED, "data[0] is [1]"),
    ],
)
def test_wrong_kinds_are_400_naming_tensor_index_and_value(server, model, datatype, shape, data, first, detail):
    status, message = error_of(server, model, tensor_body(datatype, shape, data))
    assert status == 400
    assert message.startswith(first + " (input 'IN0'"), message
    assert detail in message


def test_out_of_range_values_are_refused_not_wrapped(server):
    status, message = error_of(server, "i32", i32_body([1, 3_000_000_000]))
    assert status == 400
    assert message == "input 'IN0': data[1] is 3000000000, out of range for INT32 [-2147483648, 2147483647]"


def test_nested_data_following_the_shape_is_accepted(client, server):
    status, _, data = post(server, "/v2/models/grid/infer", tensor_body("FP32", [2, 3], [[1, 2, 3], [4, 5, 6]]))
    assert status == 200
    assert json.loads(data)["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    status, _, data = post(server, "/v2/models/i32/infer", i32_body([]))
    assert status == 200 and json.loads(data)["outputs"][0]["shape"] == [0]


def test_a_batch_of_zero_rows_is_refused_over_http_and_grpc(server):
    expected = "input byte size mismatch for input 'IN0' for model 'batched'. Expected 8, got 0"
    status, message = error_of(server, "batched", tensor_body("INT32", [0, 2], []))
    assert status == 400 and message.startswith(expected)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("IN0", [0, 2], "INT32")
    inp.set_data_from_numpy(np.zeros((0, 2), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="input byte size mismatch for input 'IN0'") as info:
        g.infer("batched", [inp])
    assert info.value.message().startswith(expected)
    g.close()


def test_non_utf8_and_lone_surrogates_are_400_naming_the_field(server):
    body = b'{"id":"r\xff","inputs":[{"name":"IN0","datatype":"BYTES","shape":[1],"data":["a"]}]}'
    status, message = error_of(server, "text", body)
    assert status == 400
    assert message.startswith("failed to parse the request JSON buffer: 'utf-8' codec can't decode byte 0xff")
    assert "(in the string at id: JSON strings must be UTF-8)" in message
    status, message = error_of(server, "text", b'{"inputs":[{"name":"IN0","datatype":"BYTES","shape":[1],'
                                                b'"data":["a\\ud800"]}]}')  # fmt: skip
    assert status == 400
    assert message.startswith("failed to parse the request JSON buffer: The surrogate pair in string is invalid.")
    assert "input 'IN0': data[0]" in message


# -- request fields and parameters of the wrong type ---------------------------------------------


@pytest.mark.parametrize(
    ("fields", "first"),
    [
        ({"parameters": {"priority": -1}}, "Unable to parse 'priority': attempt to access JSON non-unsigned-integer"),
        ({"parameters": {"priority": "high"}}, "Unable to parse 'priority': attempt to access JSON non-unsigned"),
        ({"parameters": {"timeout": -5}}, "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer"),
        ({"parameters": {"timeout": 2**64}}, "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer"),
        (
            {"parameters": {"binary_data_output": "yes"}},
            "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean",
        ),  # fmt: skip
        ({"parameters": {"sequence_start": 1}}, "Unable to parse 'sequence_start': attempt to access JSON non-boolean"),
        ({"id": 5}, "Unable to parse 'id': attempt to access JSON non-string as string (got 5"),
        ({"parameters": None}, "failed to get request params.: attempt to get members for non-object"),
        ({"outputs": [{"name": "OUT0", "parameters": {"binary_data": 1}}]}, "Unable to parse 'binary_data':"),
    ],
)
def test_fields_of_the_wrong_type_are_400_naming_the_field(server, fields, first):
    status, message = error_of(server, "i32", i32_body([1], **fields))
    assert status == 400
    assert message.startswith(first), message


def test_well_typed_parameters_still_pass(server):
    body = i32_body([1], id="r1", parameters={"priority": 2**64 - 1, "timeout": 0, "custom": 1.5})
    status, _, data = post(server, "/v2/models/i32/infer", body)
    assert status == 200 and json.loads(data)["id"] == "r1"


def grpc_request(**params: tuple[str, object]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="i32")
    request.inputs.add(name="IN0", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([1], dtype=np.int32).tobytes())
    for key, (field, value) in params.items():
        setattr(request.parameters[key], field, value)
    return request


@pytest.mark.parametrize(
    ("key", "field", "value", "first"),
    [
        ("priority", "int64_param", -1, "invalid value for 'priority', expected value >= 0."),
        (
            "priority",
            "string_param",
            "x",
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),  # fmt: skip
        ("timeout", "uint64_param", 5, "invalid value type for 'timeout' parameter, expected int64_param."),
        ("timeout", "int64_param", -1, "invalid value for 'timeout', expected value >= 0."),
        ("sequence_start", "int64_param", 1, "invalid value type for 'sequence_start' parameter, expected bool_param."),
    ],
)
def test_grpc_typed_parameters_are_checked(stub, key, field, value, first):
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(grpc_request(**{key: (field, value)}))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(first)


def test_grpc_priority_and_timeout_from_tritonclient_pass(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("IN0", [2], "INT32")
    inp.set_data_from_numpy(np.array([3, 4], dtype=np.int32))
    assert g.infer("i32", [inp], priority=1, timeout=1000).as_numpy("OUT0").tolist() == [3, 4]
    g.close()


def test_log_verbose_level_out_of_range_is_400(client):
    for bad in (-1, 2**31, "1", 1.5):
        with pytest.raises(InferenceServerException, match="log_verbose_level") as info:
            client.update_log_settings({"log_verbose_level": bad})
        if bad != 2**31:
            assert "attempt to access JSON non-unsigned-integer as unsigned-integer" in info.value.message()
    assert client.update_log_settings({"log_verbose_level": 2**31 - 1})["log_verbose_level"] == 2**31 - 1
    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0


def test_a_named_repository_is_refused(server, stub):
    for path in ("/v2/repository/other/index", "/v2/repository/other/models/i32/unload"):
        status, _, data = post(server, path, b"")
        assert status == 501
        assert json.loads(data)["error"].startswith("'repository_name' specification is not supported")
    assert post(server, "/v2/repository/index", b'{"ready": true}')[0] == 200
    status, _, data = post(server, "/v2/repository/index", b'{"ready": "yes"}')
    assert status == 400 and json.loads(data)["error"].startswith("attempt to access JSON non-boolean as boolean")
    with pytest.raises(grpc.RpcError) as info:
        stub.RepositoryIndex(pb.RepositoryIndexRequest(repository_name="other"))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details().startswith("'repository_name' specification is not supported")
    assert len(stub.RepositoryIndex(pb.RepositoryIndexRequest()).models) == 6


def test_binary_data_size_must_be_a_byte_count(server):
    header = json.dumps({"inputs": [{"name": "IN0", "datatype": "INT32", "shape": [1],
                                     "parameters": {"binary_data_size": True}}]}).encode()  # fmt: skip
    body = header + np.array([1], dtype=np.int32).tobytes()
    status, message = error_of(server, "i32", body, {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400
    assert message.startswith("Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as "
                              "unsigned-integer (got true")  # fmt: skip


def test_a_large_response_is_compressed_too(server):
    values = np.arange(100_000, dtype=np.int32)  # 400 kB: compressed off the event loop
    status, headers, data = post(
        server, "/v2/models/i32/infer", values.tobytes(), {**RAW, "Accept-Encoding": "deflate"}
    )
    assert status == 200 and headers["content-encoding"] == "deflate" and len(data) < values.nbytes
    plain = zlib.decompress(data)
    n = int(headers["inference-header-content-length"])
    assert np.array_equal(np.frombuffer(plain[n:], dtype=np.int32), values)
