"""JSON tensor data without coercion, Accept-Encoding negotiation and gRPC parameter checks, in process."""

from __future__ import annotations

import gzip
import zlib

import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.parameter_checks import check_request_parameters
from inferd.frontends.http.compression import compress, response_coding
from inferd.frontends.http.json_tensors import json_array


@pytest.mark.parametrize(
    ("datatype", "data", "expected"),
    [
        ("INT8", [-128, 127], [-128, 127]),
        ("UINT64", [0, 2**64 - 1], [0, 2**64 - 1]),
        ("FP32", [1, 2.5], [1.0, 2.5]),
        ("FP64", [3], [3.0]),
        ("BOOL", [True, False], [True, False]),
        ("BYTES", ["é", ""], ["é".encode(), b""]),
    ],
)
def test_values_of_the_right_kind_are_read(datatype, data, expected):
    array = json_array(data, datatype, (len(data),), "X")
    assert array.tolist() == expected


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        (
            "UINT8",
            [3, -1],
            "attempt to access JSON non-unsigned-integer as unsigned-integer (input 'X', UINT8: "
            "data[1] is -1, expected an integer >= 0)",
        ),  # fmt: skip
        ("INT64", [2**63], "input 'X': data[0] is 9223372036854775808, out of range for INT64"),
        ("INT16", [False], "non-signed-integer as signed-integer (input 'X', INT16: data[0] is false"),
        ("FP32", [10**400, 1], "input 'X': data[0] is 1000000000000000000000000000000000000..., out of range for FP32"),
        ("FP64", ["1.0", 2], "non-number as double (input 'X', FP64: data[0] is \"1.0\", expected a number)"),
        ("BYTES", ["a", None], "non-string as string (input 'X', BYTES: data[1] is null, expected a string)"),
        ("BYTES", ["\ud800", "b"], "The surrogate pair in string is invalid. (input 'X': data[0] holds a lone"),
    ],
)
def test_values_of_the_wrong_kind_or_range_are_refused(datatype, data, message):
    with pytest.raises(InvalidArgument) as info:
        json_array(data, datatype, (len(data),), "X")
    assert message in info.value.message


def test_nesting_must_follow_the_shape():
    assert json_array([[[1], [2]], [[3], [4]]], "INT32", (2, 2, 1), "X").tolist() == [[[1], [2]], [[3], [4]]]
    with pytest.raises(InvalidArgument, match=r"data\[1\]\[0\] should be a list of 1 elements, got 2"):
        json_array([[[1], [2]], [[3, 4], [5]]], "INT32", (2, 2, 1), "X")
    with pytest.raises(InvalidArgument, match=r"data\[0\]\[1\] is 2.5"):
        json_array([[1, 2.5], [3, 4]], "INT32", (2, 2), "X")
    with pytest.raises(InvalidArgument, match="shape \\[\\] takes a flat list"):
        json_array([[1]], "INT32", (), "X")
    with pytest.raises(InvalidArgument, match="non-array as array"):
        json_array({"a": 1}, "INT32", (1,), "X")


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("gzip;q=", None),  # a weight that does not parse drops the entry, as std::stod does in Triton
        ("gzip ;q=1", None),  # the name is read up to ';q=' as written
        (";q=1, deflate", "deflate"),
        ("deflate;q=0.2,gzip;q=0.1", "deflate"),
        ("identity;q=0.9, gzip;q=0.5", None),
        ("  gzip", "gzip"),
        ("", None),
    ],
)
def test_accept_encoding_negotiation(accept, coding):
    assert response_coding(accept.encode()) == coding
    assert response_coding(accept.encode()) == coding  # the remembered answer is the same


def test_compress_writes_gzip_and_zlib_streams():
    parts = [b'{"a":1}', memoryview(b"\x00\x01" * 100)]
    whole = b"".join(bytes(p) for p in parts)
    assert gzip.decompress(compress(parts, "gzip")) == whole
    assert zlib.decompress(compress(parts, "deflate")) == whole


def _params(**values: tuple[str, object]) -> dict[str, pb.InferParameter]:
    request = pb.ModelInferRequest()
    for key, (field, value) in values.items():
        setattr(request.parameters[key], field, value)
    return dict(request.parameters)


def test_grpc_parameter_checks():
    check_request_parameters(_params(priority=("uint64_param", 2**64 - 1), timeout=("int64_param", 0),
                                     sequence_id=("string_param", "s"), other=("double_param", 1.5)))  # fmt: skip
    with pytest.raises(InvalidArgument, match=r"expected int64_param or string_param\. \(got bool_param\)"):
        check_request_parameters(_params(sequence_id=("bool_param", True)))
    request = pb.ModelInferRequest()
    request.parameters["priority"].Clear()
    with pytest.raises(InvalidArgument, match=r"\(got no value\)"):
        check_request_parameters(dict(request.parameters))
