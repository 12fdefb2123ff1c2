"""The pre-built request bodies the load generators send, and the check that a server answers them right.

Three protocols: ``http-binary`` (KServe v2 JSON header + raw tensor bytes, the binary tensor
extension with ``Inference-Header-Content-Length``), ``http-json`` (tensor as a JSON list) and
``grpc`` (a length-prefixed ``ModelInferRequest`` frame with ``raw_input_contents``).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field

import grpc
import numpy as np

from inferd.frontends.grpc import grpc_service_pb2 as pb

PROTOCOLS = ("http-binary", "http-json", "grpc")
GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class Request:
    """One request as bytes on the wire: the HTTP body (or gRPC frame) and its headers."""

    protocol: str
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def grpc_message(self) -> bytes:
        """The protobuf message inside a gRPC frame (5-byte prefix removed)."""
        return self.body[5:]


def build_request(protocol: str, model: str, x: np.ndarray) -> Request:
    """The request for ``model`` carrying ``x`` (FP32) over ``protocol``."""
    shape = list(x.shape)
    if protocol == "http-binary":
        raw = x.astype("<f4").tobytes()
        head = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": len(raw)}}
                ],
                "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}],
            },
            separators=(",", ":"),
        ).encode()
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
        return Request(protocol, f"/v2/models/{model}/infer", head + raw, headers)
    if protocol == "http-json":
        body = json.dumps(
            {
                "inputs": [{"name": "INPUT", "shape": shape, "datatype": "FP32", "data": x.ravel().tolist()}],
                "outputs": [{"name": "OUTPUT"}],
            },
            separators=(",", ":"),
        ).encode()
        return Request(protocol, f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
    if protocol == "grpc":
        msg = pb.ModelInferRequest(
            model_name=model,
            inputs=[pb.ModelInferRequest.InferInputTensor(name="INPUT", datatype="FP32", shape=shape)],
            outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="OUTPUT")],
            raw_input_contents=[x.astype("<f4").tobytes()],
        ).SerializeToString()
        frame = b"\x00" + len(msg).to_bytes(4, "big") + msg
        return Request(protocol, GRPC_PATH, frame, {"content-type": "application/grpc", "te": "trailers"})
    raise SystemExit(f"unknown protocol {protocol!r}: choose from {', '.join(PROTOCOLS)}")


def http_output(data: bytes, head_len: str | None) -> np.ndarray:
    """OUTPUT from a KServe v2 HTTP response body (binary tensor extension or JSON)."""
    head = json.loads(data[: int(head_len)] if head_len else data)
    out = next(o for o in head["outputs"] if o["name"] == "OUTPUT")
    size = (out.get("parameters") or {}).get("binary_data_size")
    if size is not None and head_len:
        return np.frombuffer(data[int(head_len) : int(head_len) + size], dtype="<f4").reshape(out["shape"])
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def call_http(port: int, req: Request, timeout: float = 30.0) -> tuple[int, http.client.HTTPResponse]:
    """POST ``req`` to 127.0.0.1:``port``; return (status, response)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", req.path, body=req.body, headers=req.headers)
    resp = conn.getresponse()
    return resp.status, resp


def call_grpc(port: int, req: Request, timeout: float = 30.0) -> bytes:
    """Send ``req``'s message as a unary gRPC call; return the response message bytes."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(GRPC_PATH, request_serializer=None, response_deserializer=None)
        return call(req.grpc_message, timeout=timeout)


def check(port: int, req: Request, expected: np.ndarray | None) -> tuple[str | None, int]:
    """Send ``req`` once; (None when the answer is right, else why not; the answer's body length).

    ``expected`` None accepts any successful answer. For gRPC the length is that of the response
    frame (message + 5-byte prefix), which h2load's data byte count is compared against.
    """
    try:
        if req.protocol == "grpc":
            raw = call_grpc(port, req)
            size = len(raw) + 5
            if expected is None:
                return None, size
            resp = pb.ModelInferResponse.FromString(raw)
            got = np.frombuffer(resp.raw_output_contents[0], dtype="<f4").reshape(list(resp.outputs[0].shape))
        else:
            status, resp = call_http(port, req)
            data = resp.read()
            size = len(data)
            if status != 200:
                return f"HTTP {status}: {data[:200]!r}", size
            if expected is None:
                return None, size
            got = http_output(data, resp.getheader("Inference-Header-Content-Length"))
    except (OSError, grpc.RpcError, KeyError, ValueError, StopIteration, IndexError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}", 0
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
        return f"wrong output: got {got.ravel()[:4]}..., expected {expected.ravel()[:4]}...", size
    return None, size
