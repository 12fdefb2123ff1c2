"""The HTTP response header is written as ``json.dumps(..., separators=(",", ":"))`` writes it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.frontends.http.codec import encode_response


def _canonical(header: bytes) -> bytes:
    return json.dumps(json.loads(header), separators=(",", ":")).encode()


def test_header_fields_in_order_with_escapes_parameters_and_binary_sizes() -> None:
    out = InferTensor('OUT "é"\n', "FP32", (2, 3), np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
    text = InferTensor("S", "BYTES", (2,), np.array([b"a", "\u00fc"], dtype=object), {"k": [1, "\u00fc"]})
    response = InferResponse("m\u00fc", "1", "req-1", [out, text], {"p": 1.5})
    request = InferRequest("m", outputs=[RequestedOutput(out.name, {"binary_data": True}), RequestedOutput("S")])
    parts, length = encode_response(response, request, False)
    header = bytes(parts[0])
    assert header == _canonical(header)
    assert length == len(header)
    assert json.loads(header) == {
        "model_name": "m\u00fc",
        "model_version": "1",
        "id": "req-1",
        "parameters": {"p": 1.5},
        "outputs": [
            {"name": out.name, "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}},
            {
                "name": "S",
                "datatype": "BYTES",
                "shape": [2],
                "data": ["a", "\u00fc"],
                "parameters": {"k": [1, "\u00fc"]},
            },
        ],
    }
    assert b"\\u00fc" in header  # ensure_ascii, as json.dumps by default
    assert bytes(parts[1]) == out.data.tobytes()


def test_json_only_response_has_no_length_and_the_same_bytes_as_json_dumps() -> None:
    data = np.array([[0.1, float("nan"), 3.0]], dtype=np.float64)
    response = InferResponse("m", "2", "", [InferTensor("Y", "FP64", (1, 3), data)])
    parts, length = encode_response(response, InferRequest("m"), False)
    assert length is None and len(parts) == 1
    expected = {
        "model_name": "m",
        "model_version": "2",
        "outputs": [{"name": "Y", "datatype": "FP64", "shape": [1, 3], "data": [0.1, float("nan"), 3.0]}],
    }
    assert parts[0] == json.dumps(expected, separators=(",", ":")).encode()


def test_a_shape_json_cannot_write_fails_as_json_dumps_does() -> None:
    response = InferResponse("m", "1", "", [InferTensor("I", "INT64", (np.int64(1),), np.array([1]))])
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_response(response, InferRequest("m"), False)
