"""The generated protobuf code is current, and its schema is Triton's on the wire."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format

from inferd.config import model_config_pb2 as ours_mc
from inferd.frontends.grpc import grpc_service_pb2 as ours_svc
from inferd.frontends.grpc import grpc_service_pb2_grpc, health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "core" / "src"

# Stamps of the protoc / grpcio-tools version that made the files; not part of the schema.
_STAMPS = [
    re.compile(r"# Protobuf Python Version: .*"),
    re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)"),
    re.compile(r"GRPC_GENERATED_VERSION = '[^']*'"),
]


def _unstamped(text: str) -> str:
    for stamp in _STAMPS:
        text = stamp.sub("<version>", text)
    return text


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "gen_protos.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True, capture_output=True)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "gen_protos.py wrote nothing"
    stale = [
        str(rel)
        for rel in generated
        if not (SRC / rel).is_file() or _unstamped((SRC / rel).read_text()) != _unstamped((tmp_path / rel).read_text())
    ]
    assert not stale, f"out of date (run `make protos`): {stale}"


def test_generated_imports_are_package_imports() -> None:
    svc = (SRC / "inferd/frontends/grpc/grpc_service_pb2.py").read_text()
    assert "from inferd.config import model_config_pb2 as model__config__pb2" in svc
    assert ours_svc.ModelConfigResponse.DESCRIPTOR.fields_by_name["config"].message_type is (
        ours_mc.ModelConfig.DESCRIPTOR
    )


# --- against tritonclient's own generated code --------------------------------------------

import tritonclient.grpc.model_config_pb2 as tc_mc  # noqa: E402
import tritonclient.grpc.service_pb2 as tc_svc  # noqa: E402


def _walk(file_descriptor):
    """Every message type of a file, nested ones included."""
    stack = list(file_descriptor.message_types_by_name.values())
    while stack:
        message = stack.pop()
        yield message
        stack.extend(message.nested_types)


@pytest.mark.parametrize(("theirs", "ours"), [(tc_mc, ours_mc), (tc_svc, ours_svc)])
def test_every_triton_field_has_the_same_name_number_and_type(theirs, ours) -> None:
    pool = ours.DESCRIPTOR.pool
    for message in _walk(theirs.DESCRIPTOR):
        mine = pool.FindMessageTypeByName(message.full_name)
        for field in message.fields:
            other = mine.fields_by_name.get(field.name)
            assert other is not None, f"{message.full_name}.{field.name} missing"
            assert (other.number, other.type, other.is_repeated) == (field.number, field.type, field.is_repeated), (
                f"{message.full_name}.{field.name}"
            )
            if field.containing_oneof is not None:
                assert other.containing_oneof.name == field.containing_oneof.name
            if field.enum_type is not None:
                theirs_values = {v.name: v.number for v in field.enum_type.values}
                assert {v.name: v.number for v in other.enum_type.values} == theirs_values


def test_services_have_triton_methods() -> None:
    theirs = tc_svc.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    mine = ours_svc.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert [m.name for m in mine.methods] == [m.name for m in theirs.methods]
    for method in theirs.methods:
        other = mine.methods_by_name[method.name]
        assert other.input_type.full_name == method.input_type.full_name
        assert other.output_type.full_name == method.output_type.full_name
        assert (other.client_streaming, other.server_streaming) == (method.client_streaming, method.server_streaming)
    assert hasattr(grpc_service_pb2_grpc, "add_GRPCInferenceServiceServicer_to_server")
    import grpc

    with grpc.insecure_channel("127.0.0.1:9") as channel:  # never connects: stubs bind lazily
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert all(callable(getattr(stub, m.name)) for m in theirs.methods)
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    assert health.full_name == "grpc.health.v1.Health"
    assert [m.name for m in health.methods] == ["Check"]
    assert hasattr(health_pb2_grpc, "add_HealthServicer_to_server")


def _same_on_the_wire(theirs_message, ours_class) -> None:
    """Bytes from tritonclient parse into ours equal, and back."""
    data = theirs_message.SerializeToString()
    mine = ours_class.FromString(data)
    assert json_format.MessageToDict(mine) == json_format.MessageToDict(theirs_message)
    back = type(theirs_message).FromString(mine.SerializeToString())
    assert back == theirs_message


def test_model_infer_request_round_trips() -> None:
    request = tc_svc.ModelInferRequest(model_name="m", model_version="2", id="req-1")
    request.parameters["sequence_id"].int64_param = 42
    request.parameters["sequence_start"].bool_param = True
    request.parameters["name"].string_param = "x"
    request.parameters["ratio"].double_param = 0.25
    request.parameters["big"].uint64_param = 2**63
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 3])
    tensor.parameters["binary_data_size"].int64_param = 24
    tensor.contents.fp32_contents.extend([1.5, 2.5])
    strings = request.inputs.add(name="S", datatype="BYTES", shape=[1])
    strings.contents.bytes_contents.append(b"\x00abc")
    output = request.outputs.add(name="OUTPUT0")
    output.parameters["classification"].int64_param = 3
    request.raw_input_contents.extend([b"\x01\x02\x03\x04" * 6, b"\xff"])
    _same_on_the_wire(request, ours_svc.ModelInferRequest)


def test_responses_and_statistics_round_trip() -> None:
    response = tc_svc.ModelInferResponse(model_name="m", model_version="1", id="r")
    response.outputs.add(name="OUT", datatype="INT64", shape=[4]).contents.int64_contents.extend([1, -2, 3, 2**40])
    response.raw_output_contents.append(b"\x00" * 32)
    response.parameters["triton_final_response"].bool_param = True
    stream = tc_svc.ModelStreamInferResponse(error_message="boom", infer_response=response)
    _same_on_the_wire(stream, ours_svc.ModelStreamInferResponse)

    stats = tc_svc.ModelStatisticsResponse()
    model = stats.model_stats.add(name="m", version="1", last_inference=123, inference_count=5, execution_count=2)
    model.inference_stats.success.count = 5
    model.inference_stats.queue.ns = 1000
    model.batch_stats.add(batch_size=4).compute_infer.count = 2
    model.response_stats["0"].compute_output.ns = 7
    model.memory_usage.add(type="CPU", id=0, byte_size=1024)
    _same_on_the_wire(stats, ours_svc.ModelStatisticsResponse)


RICH_CONFIG = """
name: "rich" backend: "onnxruntime" max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape { shape: [ -1, 3, 1 ] } } ]
output [ { name: "y" data_type: TYPE_STRING dims: [ 1 ] label_filename: "labels.txt" } ]
instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ]
  rate_limiter { resources [ { name: "R" global: true count: 2 } ] priority: 1 }
  secondary_devices [ { kind: KIND_NVDLA device_id: 1 } ] } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100
  priority_levels: 2 default_priority_level: 1
  priority_queue_policy { key: 2 value { timeout_action: DELAY max_queue_size: 3 } } }
optimization { graph { level: 1 } cuda { graphs: true graph_spec [ { batch_size: 2
  input { key: "x" value { dim: [ 2, 3 ] } } } ] }
  execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" } } ] } }
parameters { key: "k" value { string_value: "v" } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32
  dims: [ 1, 3 ] random_data: true } } } ]
model_transaction_policy { decoupled: true }
response_cache { enable: false }
model_repository_agents { agents [ { name: "checksum" parameters { key: "a" value: "b" } } ] }
"""


def test_model_config_round_trips() -> None:
    theirs = text_format.Parse(RICH_CONFIG, tc_mc.ModelConfig())
    _same_on_the_wire(theirs, ours_mc.ModelConfig)
    mine = text_format.Parse(RICH_CONFIG, ours_mc.ModelConfig())
    assert mine.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    response = tc_svc.ModelConfigResponse(config=theirs)
    _same_on_the_wire(response, ours_svc.ModelConfigResponse)
