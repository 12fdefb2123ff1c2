"""The fixed gRPC requests of the golden-response test (tests/e2e/test_golden_responses.py).

Each call is ``GrpcCall(name, method, requests)``: ``method`` names an RPC of
``inference.GRPCInferenceService`` (or ``Check`` of ``grpc.health.v1.Health``); a streaming RPC
sends all of its ``requests`` on one stream. They are sent in this order, one at a time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import Message

from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc import health_pb2
from tests.e2e.golden_http import MODELS, WORDS, A, B, X

STREAMING = {"ModelStreamInfer"}


@dataclass(frozen=True)
class GrpcCall:
    """One RPC and its request message(s)."""

    name: str
    method: str
    requests: tuple[Message, ...]


def _call(name: str, method: str, *requests: Message) -> GrpcCall:
    return GrpcCall(name, method, requests)


def _input(
    name: str, datatype: str, shape: list[int], **contents: list[object]
) -> pb.ModelInferRequest.InferInputTensor:
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    if contents:
        tensor.contents.CopyFrom(pb.InferTensorContents(**contents))  # type: ignore[arg-type]
    return tensor


def _raw_add_sub(**kw: object) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        inputs=[_input("INPUT0", "FP32", [1, 4]), _input("INPUT1", "FP32", [1, 4])],
        raw_input_contents=[A.tobytes(), B.tobytes()],
        **{"model_name": "add_sub", **kw},  # type: ignore[arg-type]
    )


def _typed_add_sub(a: np.ndarray = A, b: np.ndarray = B, datatype: str = "FP32", **kw: object) -> pb.ModelInferRequest:
    field = "int_contents" if datatype == "INT32" else "fp32_contents"
    return pb.ModelInferRequest(
        model_name="add_sub",
        inputs=[_input("INPUT0", datatype, list(a.shape), **{field: a.reshape(-1).tolist()}),
                _input("INPUT1", "FP32", list(b.shape), fp32_contents=b.reshape(-1).tolist())],
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _out(name: str) -> pb.ModelInferRequest.InferRequestedOutputTensor:
    return pb.ModelInferRequest.InferRequestedOutputTensor(name=name)


def metadata_calls() -> list[GrpcCall]:
    calls = [
        _call("ServerLive", "ServerLive", pb.ServerLiveRequest()),
        _call("ServerReady", "ServerReady", pb.ServerReadyRequest()),
        _call("ServerMetadata", "ServerMetadata", pb.ServerMetadataRequest()),
        _call("health Check", "Check", health_pb2.HealthCheckRequest()),
    ]
    for m in MODELS:
        for v in ("", "1"):
            calls += [
                _call(f"ModelReady {m} '{v}'", "ModelReady", pb.ModelReadyRequest(name=m, version=v)),
                _call(f"ModelMetadata {m} '{v}'", "ModelMetadata", pb.ModelMetadataRequest(name=m, version=v)),
                _call(f"ModelConfig {m} '{v}'", "ModelConfig", pb.ModelConfigRequest(name=m, version=v)),
            ]
    for m, v in (("nope", ""), ("add_sub", "9")):
        calls += [
            _call(f"ModelReady unknown {m} '{v}'", "ModelReady", pb.ModelReadyRequest(name=m, version=v)),
            _call(f"ModelMetadata unknown {m} '{v}'", "ModelMetadata", pb.ModelMetadataRequest(name=m, version=v)),
            _call(f"ModelConfig unknown {m} '{v}'", "ModelConfig", pb.ModelConfigRequest(name=m, version=v)),
        ]
    return calls


def infer_calls() -> list[GrpcCall]:
    words = b"".join(struct.pack("<I", len(w)) + w for w in WORDS)
    upper = {"upper": pb.InferParameter(bool_param=True)}
    return [
        _call("infer add_sub raw", "ModelInfer", _raw_add_sub()),
        _call("infer add_sub raw with id and parameters", "ModelInfer",
              _raw_add_sub(id="req-7", parameters={"k": pb.InferParameter(int64_param=1)})),
        _call("infer add_sub raw versioned", "ModelInfer", _raw_add_sub(model_version="1")),
        _call("infer add_sub raw output subset", "ModelInfer", _raw_add_sub(outputs=[_out("OUTPUT1")])),
        _call("infer add_sub typed", "ModelInfer", _typed_add_sub()),
        _call("infer add_sub typed two rows", "ModelInfer", _typed_add_sub(np.vstack([A, B]), np.vstack([B, A]))),
        _call("infer string_identity raw", "ModelInfer", pb.ModelInferRequest(
            model_name="string_identity", inputs=[_input("INPUT", "BYTES", [3])], raw_input_contents=[words])),
        _call("infer string_identity typed upper", "ModelInfer", pb.ModelInferRequest(
            model_name="string_identity", parameters=upper,
            inputs=[_input("INPUT", "BYTES", [3], bytes_contents=WORDS)])),
        _call("infer mlp_onnx raw", "ModelInfer", pb.ModelInferRequest(
            model_name="mlp_onnx", inputs=[_input("INPUT", "FP32", [2, 8])], raw_input_contents=[X.tobytes()])),
        _call("infer mlp_onnx typed", "ModelInfer", pb.ModelInferRequest(
            model_name="mlp_onnx", inputs=[_input("INPUT", "FP32", [2, 8], fp32_contents=X.reshape(-1).tolist())])),
        _call("infer mlp_onnx classification top 2", "ModelInfer", pb.ModelInferRequest(
            model_name="mlp_onnx", inputs=[_input("INPUT", "FP32", [2, 8])], raw_input_contents=[X.tobytes()],
            outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(
                name="OUTPUT", parameters={"classification": pb.InferParameter(int64_param=2)})])),
        _call("stream string_identity upper", "ModelStreamInfer", pb.ModelInferRequest(
            model_name="string_identity", parameters=upper, id="u1",
            inputs=[_input("INPUT", "BYTES", [3], bytes_contents=WORDS)])),
        _call("stream add_sub good then bad", "ModelStreamInfer",
              _raw_add_sub(id="s1"), _raw_add_sub(id="s2", outputs=[_out("OUTPUT9")]), _raw_add_sub(id="s3")),
    ]  # fmt: skip


def infer_error_calls() -> list[GrpcCall]:
    raw = _raw_add_sub()
    missing = pb.ModelInferRequest(model_name="add_sub", inputs=[raw.inputs[0]], raw_input_contents=[A.tobytes()])
    short = _raw_add_sub()
    short.raw_input_contents[0] = A.tobytes()[:8]
    both = _typed_add_sub()
    both.raw_input_contents.extend([A.tobytes(), B.tobytes()])
    uneven = _raw_add_sub()
    del uneven.raw_input_contents[1]
    return [
        _call("infer unknown model", "ModelInfer", _raw_add_sub(model_name="nope")),
        _call("infer unknown version", "ModelInfer", _raw_add_sub(model_version="9")),
        _call("infer wrong dtype", "ModelInfer", _typed_add_sub(A.astype(np.int32), datatype="INT32")),
        _call("infer wrong shape", "ModelInfer", _typed_add_sub(A[:, :3], B[:, :3])),
        _call("infer batch larger than max_batch_size", "ModelInfer",
              _typed_add_sub(np.repeat(A, 9, 0), np.repeat(B, 9, 0))),
        _call("infer missing input", "ModelInfer", missing),
        _call("infer unknown output", "ModelInfer", _raw_add_sub(outputs=[_out("OUTPUT9")])),
        _call("infer raw contents of the wrong size", "ModelInfer", short),
        _call("infer raw and typed contents", "ModelInfer", both),
        _call("infer fewer raw contents than inputs", "ModelInfer", uneven),
        _call("infer typed contents of the wrong count", "ModelInfer", _typed_add_sub(A, B[:, :2].reshape(1, 2))),
        _call("infer sequence id on a model without sequence batching", "ModelInfer", _raw_add_sub(
            parameters={"sequence_id": pb.InferParameter(int64_param=5)})),
        _call("infer classification of a string output", "ModelInfer", pb.ModelInferRequest(
            model_name="string_identity", inputs=[_input("INPUT", "BYTES", [1], bytes_contents=[b"a"])],
            outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(
                name="OUTPUT", parameters={"classification": pb.InferParameter(int64_param=1)})])),
    ]  # fmt: skip


def extension_calls() -> list[GrpcCall]:
    return [
        _call("RepositoryIndex", "RepositoryIndex", pb.RepositoryIndexRequest()),
        _call("RepositoryIndex ready", "RepositoryIndex", pb.RepositoryIndexRequest(ready=True)),
        _call("TraceSetting", "TraceSetting", pb.TraceSettingRequest()),
        _call("TraceSetting add_sub", "TraceSetting", pb.TraceSettingRequest(model_name="add_sub")),
        _call("TraceSetting unknown model", "TraceSetting", pb.TraceSettingRequest(model_name="nope")),
        _call("LogSettings", "LogSettings", pb.LogSettingsRequest()),
        _call("SystemSharedMemoryStatus", "SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
    ]


def stats_calls() -> list[GrpcCall]:
    return [
        _call("ModelStatistics all", "ModelStatistics", pb.ModelStatisticsRequest()),
        _call("ModelStatistics add_sub", "ModelStatistics", pb.ModelStatisticsRequest(name="add_sub")),
        _call("ModelStatistics add_sub 1", "ModelStatistics", pb.ModelStatisticsRequest(name="add_sub", version="1")),
        _call("ModelStatistics unknown", "ModelStatistics", pb.ModelStatisticsRequest(name="nope")),
    ]


def lifecycle_calls() -> list[GrpcCall]:
    """Sent last: they change what is loaded."""
    return [
        _call("unload mlp_onnx", "RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="mlp_onnx")),
        _call("index after unload", "RepositoryIndex", pb.RepositoryIndexRequest()),
        _call("ModelReady after unload", "ModelReady", pb.ModelReadyRequest(name="mlp_onnx")),
        _call("load mlp_onnx", "RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="mlp_onnx")),
        _call("index after load", "RepositoryIndex", pb.RepositoryIndexRequest()),
        _call("load unknown model", "RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="nope")),
        _call("load with a non-string config", "RepositoryModelLoad", pb.RepositoryModelLoadRequest(
            model_name="add_sub", parameters={"config": pb.ModelRepositoryParameter(bool_param=True)})),
    ]  # fmt: skip
