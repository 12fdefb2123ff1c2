"""The fixed HTTP requests of the golden-response test (tests/e2e/test_golden_responses.py).

Each request is ``HttpCall(name, method, path, body, headers)``. They are sent in this order, one
at a time, so statistics counts are the same on every run. Bodies are built here, byte for byte.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

MODELS = ("add_sub", "string_identity", "mlp_onnx")
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class HttpCall:
    """One raw HTTP request; ``port`` is "http" or "metrics"."""

    name: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    port: str = "http"


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


A = np.array([[1.5, 2.0, -3.25, 4.0]], np.float32)
B = np.array([[10.0, 0.5, 7.0, -1.0]], np.float32)
X = np.arange(16, dtype=np.float32).reshape(2, 8) / 7.0 - 1.0
WORDS = [b"abc", b"Hello", b""]


def _tensor(name: str, arr: np.ndarray, datatype: str = "FP32") -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": list(arr.shape), "data": arr.reshape(-1).tolist()}


def _add_sub(**extra: object) -> dict[str, object]:
    return {"inputs": [_tensor("INPUT0", A), _tensor("INPUT1", B)], **extra}


def _binary(header: dict[str, object], blobs: list[bytes], length: str | None = None) -> tuple[bytes, dict[str, str]]:
    """Body and headers of a binary-tensor-extension request."""
    head = _json(header)
    headers = {"Content-Type": "application/octet-stream",
               "Inference-Header-Content-Length": length if length is not None else str(len(head))}  # fmt: skip
    return head + b"".join(blobs), headers


def _bytes_blob(words: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(w)) + w for w in words)


def _binary_input(name: str, datatype: str, shape: list[int], blob: bytes) -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(blob)}}


def _infer(name: str, model: str, body: bytes, headers: dict[str, str] | None = None, version: str = "") -> HttpCall:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return HttpCall(name, "POST", path, body, JSON if headers is None else headers)


def metadata_calls() -> list[HttpCall]:
    calls = [
        HttpCall("health live", "GET", "/v2/health/live"),
        HttpCall("health ready", "GET", "/v2/health/ready"),
        HttpCall("server metadata", "GET", "/v2"),
    ]
    for m in MODELS:
        for prefix in (f"/v2/models/{m}", f"/v2/models/{m}/versions/1"):
            calls += [
                HttpCall(f"metadata {prefix}", "GET", prefix),
                HttpCall(f"ready {prefix}", "GET", prefix + "/ready"),
                HttpCall(f"config {prefix}", "GET", prefix + "/config"),
            ]
    calls += [
        HttpCall("metadata unknown model", "GET", "/v2/models/nope"),
        HttpCall("ready unknown model", "GET", "/v2/models/nope/ready"),
        HttpCall("config unknown model", "GET", "/v2/models/nope/config"),
        HttpCall("metadata unknown version", "GET", "/v2/models/add_sub/versions/9"),
        HttpCall("ready unknown version", "GET", "/v2/models/add_sub/versions/9/ready"),
        HttpCall("config unknown version", "GET", "/v2/models/add_sub/versions/9/config"),
        HttpCall("unknown route", "GET", "/v2/nothing/here"),
        HttpCall("wrong method on a route", "POST", "/v2/health/live", b"", JSON),
        HttpCall("GET on the infer route", "GET", "/v2/models/add_sub/infer"),
    ]
    return calls


def infer_calls() -> list[HttpCall]:
    two_rows = {"inputs": [_tensor("INPUT0", np.vstack([A, B])), _tensor("INPUT1", np.vstack([B, A]))]}
    bin_a, bin_b = A.tobytes(), B.tobytes()
    binary_all = _binary(
        {"inputs": [_binary_input("INPUT0", "FP32", [1, 4], bin_a), _binary_input("INPUT1", "FP32", [1, 4], bin_b)],
         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                     {"name": "OUTPUT1", "parameters": {"binary_data": True}}]},
        [bin_a, bin_b],
    )  # fmt: skip
    mixed = _binary(
        {"inputs": [_binary_input("INPUT0", "FP32", [1, 4], bin_a), _tensor("INPUT1", B)],
         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]},
        [bin_a],
    )  # fmt: skip
    words = _bytes_blob(WORDS)
    strings_binary = _binary(
        {"inputs": [_binary_input("INPUT", "BYTES", [3], words)], "parameters": {"binary_data_output": True}},
        [words],
    )
    mlp_binary = _binary(
        {"inputs": [_binary_input("INPUT", "FP32", [2, 8], X.tobytes())],
         "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}]},
        [X.tobytes()],
    )  # fmt: skip
    strings = {"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [2], "data": ["abc", "Hello"]}]}
    return [
        _infer("add_sub json", "add_sub", _json(_add_sub())),
        _infer("add_sub json with id and parameters", "add_sub", _json(_add_sub(id="req-7", parameters={"k": 1}))),
        _infer("add_sub json versioned", "add_sub", _json(_add_sub()), version="1"),
        _infer("add_sub json output subset", "add_sub", _json(_add_sub(outputs=[{"name": "OUTPUT1"}]))),
        _infer("add_sub json two rows", "add_sub", _json(two_rows)),
        _infer("add_sub binary_data_output", "add_sub", _json(_add_sub(parameters={"binary_data_output": True}))),
        _infer("add_sub binary in and out", "add_sub", *binary_all),
        _infer("add_sub mixed binary, one output", "add_sub", *mixed),
        _infer("add_sub gzip body", "add_sub", gzip.compress(_json(_add_sub()), mtime=0),
               {**JSON, "Content-Encoding": "gzip"}),
        _infer("add_sub deflate body", "add_sub", zlib.compress(_json(_add_sub())),
               {**JSON, "Content-Encoding": "deflate"}),
        _infer("string_identity json", "string_identity", _json(strings)),
        _infer("string_identity json upper", "string_identity", _json({**strings, "parameters": {"upper": True}})),
        _infer("string_identity binary", "string_identity", *strings_binary),
        _infer("mlp_onnx json", "mlp_onnx", _json({"inputs": [_tensor("INPUT", X)]})),
        _infer("mlp_onnx binary", "mlp_onnx", *mlp_binary),
        _infer("mlp_onnx classification top 2", "mlp_onnx", _json({"inputs": [_tensor("INPUT", X)],
               "outputs": [{"name": "OUTPUT", "parameters": {"classification": 2}}]})),
        _infer("mlp_onnx classification, binary output", "mlp_onnx", _json({"inputs": [_tensor("INPUT", X)],
               "outputs": [{"name": "OUTPUT", "parameters": {"classification": 3, "binary_data": True}}]})),
        _infer("add_sub binary_data_output overridden per output", "add_sub", _json(_add_sub(
               parameters={"binary_data_output": True},
               outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT1"}]))),
        _infer("add_sub with priority and timeout", "add_sub",
               _json(_add_sub(parameters={"priority": 1, "timeout": 10_000_000}))),
    ]  # fmt: skip


def infer_error_calls() -> list[HttpCall]:
    wrong_dtype = {"inputs": [_tensor("INPUT0", A.astype(np.int32), "INT32"), _tensor("INPUT1", B)]}
    wrong_shape = {"inputs": [_tensor("INPUT0", A[:, :3]), _tensor("INPUT1", B[:, :3])]}
    short_data = {"inputs": [{**_tensor("INPUT0", A), "data": [1.0, 2.0]}, _tensor("INPUT1", B)]}
    too_big = {"inputs": [_tensor("INPUT0", np.repeat(A, 9, 0)), _tensor("INPUT1", np.repeat(B, 9, 0))]}
    extra_input = {"inputs": [*_add_sub()["inputs"], _tensor("INPUT9", A)]}  # type: ignore[misc]
    bin_a = A.tobytes()
    header = {"inputs": [_binary_input("INPUT0", "FP32", [1, 4], bin_a), _tensor("INPUT1", B)]}
    return [
        _infer("infer unknown model", "nope", _json(_add_sub())),
        _infer("infer unknown version", "add_sub", _json(_add_sub()), version="9"),
        _infer("infer wrong dtype", "add_sub", _json(wrong_dtype)),
        _infer("infer wrong shape", "add_sub", _json(wrong_shape)),
        _infer("infer data count does not match shape", "add_sub", _json(short_data)),
        _infer("infer batch larger than max_batch_size", "add_sub", _json(too_big)),
        _infer("infer missing input", "add_sub", _json({"inputs": [_tensor("INPUT0", A)]})),
        _infer("infer unexpected input", "add_sub", _json(extra_input)),
        _infer("infer unknown output", "add_sub", _json(_add_sub(outputs=[{"name": "OUTPUT9"}]))),
        _infer("infer malformed json", "add_sub", b'{"inputs": [', JSON),
        _infer("infer json not an object", "add_sub", b"[1, 2]", JSON),
        _infer("infer empty body", "add_sub", b"", JSON),
        _infer("infer string for fp32 data", "add_sub",
               _json({"inputs": [{**_tensor("INPUT0", A), "data": ["a", "b", "c", "d"]}, _tensor("INPUT1", B)]})),
        _infer("infer binary header length past the body", "add_sub", *_binary(header, [bin_a], length="100000")),
        _infer("infer binary header length not a number", "add_sub", *_binary(header, [bin_a], length="ten")),
        _infer("infer binary_data_size past the body", "add_sub", *_binary(header, [bin_a[:8]])),
        _infer("infer bad gzip body", "add_sub", b"not gzip", {**JSON, "Content-Encoding": "gzip"}),
        _infer("infer classification of a string output", "string_identity", _json({
               "inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
               "outputs": [{"name": "OUTPUT", "parameters": {"classification": 1}}]})),
        _infer("infer classification count not a number", "mlp_onnx", _json({"inputs": [_tensor("INPUT", X)],
               "outputs": [{"name": "OUTPUT", "parameters": {"classification": "two"}}]})),
        _infer("infer sequence id on a model without sequence batching", "add_sub",
               _json(_add_sub(parameters={"sequence_id": 5, "sequence_start": True}))),
    ]  # fmt: skip


def extension_calls() -> list[HttpCall]:
    return [
        HttpCall("repository index", "POST", "/v2/repository/index"),
        HttpCall("repository index ready", "POST", "/v2/repository/index", _json({"ready": True}), JSON),
        HttpCall("repository index malformed json", "POST", "/v2/repository/index", b"{", JSON),
        HttpCall("trace setting", "GET", "/v2/trace/setting"),
        HttpCall("trace setting of a model", "GET", "/v2/models/add_sub/trace/setting"),
        HttpCall("trace setting unknown model", "GET", "/v2/models/nope/trace/setting"),
        HttpCall("trace setting bad update", "POST", "/v2/trace/setting", _json({"trace_level": ["NOPE"]}), JSON),
        HttpCall("trace setting not an object", "POST", "/v2/trace/setting", b"[]", JSON),
        HttpCall("log settings", "GET", "/v2/logging"),
        HttpCall("log settings bad update", "POST", "/v2/logging", _json({"log_verbose_level": "x"}), JSON),
        HttpCall("generate string_identity", "POST", "/v2/models/string_identity/generate",
                 _json({"INPUT": ["abc", "de"]}), JSON),
        HttpCall("generate add_sub", "POST", "/v2/models/add_sub/generate",
                 _json({"INPUT0": A[0].tolist(), "INPUT1": B[0].tolist()}), JSON),
        HttpCall("generate_stream string_identity", "POST", "/v2/models/string_identity/generate_stream",
                 _json({"INPUT": ["xyz"], "parameters": {"upper": True}}), JSON),
        HttpCall("generate unknown model", "POST", "/v2/models/nope/generate", _json({"INPUT": "a"}), JSON),
        HttpCall("generate missing input", "POST", "/v2/models/add_sub/generate", _json({"INPUT0": [1]}), JSON),
        HttpCall("generate malformed json", "POST", "/v2/models/add_sub/generate", b"{", JSON),
    ]  # fmt: skip


def stats_calls() -> list[HttpCall]:
    return [
        HttpCall("stats of every model", "GET", "/v2/models/stats"),
        HttpCall("stats add_sub", "GET", "/v2/models/add_sub/stats"),
        HttpCall("stats add_sub version 1", "GET", "/v2/models/add_sub/versions/1/stats"),
        HttpCall("stats mlp_onnx", "GET", "/v2/models/mlp_onnx/stats"),
        HttpCall("stats unknown model", "GET", "/v2/models/nope/stats"),
    ]


ADD_SUB_OVERRIDE = {
    "backend": "python", "max_batch_size": 2,
    "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("INPUT0", "INPUT1")],
    "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("OUTPUT0", "OUTPUT1")],
}  # fmt: skip


def lifecycle_calls() -> list[HttpCall]:
    """Sent last: they change what is loaded."""
    return [
        HttpCall("unload string_identity", "POST", "/v2/repository/models/string_identity/unload"),
        HttpCall("index after unload", "POST", "/v2/repository/index"),
        HttpCall("ready after unload", "GET", "/v2/models/string_identity/ready"),
        HttpCall("infer after unload", "POST", "/v2/models/string_identity/infer",
                 _json({"inputs": [{"name": "INPUT", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}), JSON),
        HttpCall("load string_identity", "POST", "/v2/repository/models/string_identity/load"),
        HttpCall("index after load", "POST", "/v2/repository/index"),
        HttpCall("load unknown model", "POST", "/v2/repository/models/nope/load"),
        HttpCall("load bad parameters", "POST", "/v2/repository/models/add_sub/load",
                 _json({"parameters": [1]}), JSON),
        HttpCall("load add_sub with a config override", "POST", "/v2/repository/models/add_sub/load",
                 _json({"parameters": {"config": json.dumps(ADD_SUB_OVERRIDE)}}), JSON),
        HttpCall("config after the override", "GET", "/v2/models/add_sub/config"),
        HttpCall("load with a config that is not JSON", "POST", "/v2/repository/models/add_sub/load",
                 _json({"parameters": {"config": "{"}}), JSON),
    ]  # fmt: skip


def metrics_calls() -> list[HttpCall]:
    return [HttpCall("metrics", "GET", "/metrics", port="metrics")]
