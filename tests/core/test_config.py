"""Model configuration: parsing, errors, defaults, validation and Triton's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferd.config import (
    ModelConfig,
    backend_for,
    config_from_json,
    config_to_json,
    config_to_json_bytes,
    load_config,
    normalize,
    parse_config_text,
    platform_for,
    validate,
    version_policy_select,
)
from inferd.contracts.errors import ConfigError

REALISTIC = """
name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 32
version_policy: { latest: { num_versions: 2 } }
input [
  { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] },
  { name: "mask" data_type: TYPE_BOOL dims: [ -1 ] optional: true }
]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1000 ] label_filename: "labels.txt" } ]
instance_group [
  { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] },
  { name: "cpu" count: 1 kind: KIND_CPU }
]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 500
  priority_levels: 3
  default_priority_level: 2
  priority_queue_policy {
    key: 1
    value: { timeout_action: DELAY default_timeout_microseconds: 100 max_queue_size: 4 }
  }
  priority_queue_policy {
    key: 3
    value: { timeout_action: REJECT allow_timeout_override: true }
  }
}
parameters { key: "intra_op_thread_count" value: { string_value: "4" } }
parameters { key: "mode" value: { string_value: "fast" } }
optimization {
  graph: { level: 1 }
  execution_accelerators {
    gpu_execution_accelerator: [
      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }
    ]
    cpu_execution_accelerator: [ { name: "openvino" } ]
  }
}
model_warmup [
  {
    name: "zeros"
    batch_size: 4
    count: 2
    inputs { key: "image" value: { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true } }
  }
]
"""

SEQUENCE = """
name: "stateful"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"""

ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1
      input_map { key: "IN" value: "RAW" } output_map { key: "OUT" value: "tensor" } },
    { model_name: "net" model_version: 3
      input_map { key: "x" value: "tensor" } output_map { key: "y" value: "SCORES" } }
  ]
}
"""


def test_parse_realistic_config() -> None:
    config = parse_config_text(REALISTIC, "model 'resnet': config.pbtxt")
    assert isinstance(config, ModelConfig)
    assert config.name == "resnet"
    assert config.max_batch_size == 32
    assert config.version_policy.latest.num_versions == 2
    assert [i.name for i in config.input] == ["image", "mask"]
    assert list(config.input[0].dims) == [3, 224, 224]
    assert config.input[1].optional is True
    assert (
        ModelConfig.DESCRIPTOR.fields_by_name["input"]
        .message_type.enum_types_by_name["Format"]
        .values_by_number[config.input[0].format]
        .name
        == "FORMAT_NCHW"
    )
    assert list(config.instance_group[0].gpus) == [0, 1]
    batching = config.dynamic_batching
    assert list(batching.preferred_batch_size) == [8, 16]
    assert set(batching.priority_queue_policy) == {1, 3}
    assert batching.priority_queue_policy[1].max_queue_size == 4
    assert batching.priority_queue_policy[3].allow_timeout_override is True
    assert config.parameters["intra_op_thread_count"].string_value == "4"
    accelerators = config.optimization.execution_accelerators
    assert accelerators.gpu_execution_accelerator[0].parameters["precision_mode"] == "FP16"
    assert accelerators.cpu_execution_accelerator[0].name == "openvino"
    warmup = config.model_warmup[0]
    assert (warmup.batch_size, warmup.count) == (4, 2)
    assert warmup.inputs["image"].zero_data is True


def test_parse_sequence_and_ensemble() -> None:
    sequence = parse_config_text(SEQUENCE, "s").sequence_batching
    assert sequence.WhichOneof("strategy_choice") == "direct"
    assert [c.name for c in sequence.control_input] == ["START", "CORRID"]
    assert list(sequence.control_input[0].control[0].int32_false_true) == [0, 1]
    steps = parse_config_text(ENSEMBLE, "e").ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["pre", "net"]
    assert steps[1].model_version == 3
    assert dict(steps[0].output_map) == {"OUT": "tensor"}


def test_unknown_field_names_file_line_column_and_field() -> None:
    text = 'name: "x"\nbackend: "python"\n  max_batch: 3\n'
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "model 'x': config.pbtxt")
    message = str(info.value)
    assert message.startswith("model 'x': config.pbtxt line 3 column 3: ")
    assert "unknown field 'max_batch'" in message
    assert "did you mean 'max_batch_size'" in message


def test_bad_enum_value_names_field_and_choices() -> None:
    text = 'name: "x"\ninput [ { name: "a" data_type: TYPE_FLOAT32 dims: [ 1 ] } ]\n'
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "config.pbtxt")
    message = str(info.value)
    assert "line 2 column" in message
    assert "field 'data_type'" in message and "'TYPE_FLOAT32'" in message
    assert "TYPE_FP32" in message


def test_bad_value_is_reported_with_position() -> None:
    with pytest.raises(ConfigError, match=r"line 1 column \d+: .*integer"):
        parse_config_text('max_batch_size: "eight"', "config.pbtxt")


def _normalized(text: str, name: str | None = None, filename: str = "model.py") -> ModelConfig:
    config = parse_config_text(text, "test")
    normalize(config, name or config.name or "m", filename)
    return config


def _expect_invalid(text: str, match: str, **kwargs: str) -> None:
    config = _normalized(text, **kwargs)
    with pytest.raises(ConfigError, match=match):
        validate(config)


MINIMAL = (
    'backend: "python" max_batch_size: 8 '
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ] '
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]'
)


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        ("{ data_type: TYPE_FP32 dims: [ 1 ] }", "must specify 'name'"),
        ('{ name: "b" dims: [ 1 ] }', r"input 'b' must specify 'data_type'"),
        ('{ name: "b" data_type: TYPE_FP32 }', r"input 'b' must specify 'dims'"),
        ('{ name: "b" data_type: TYPE_FP32 dims: [ 0 ] }', r"input 'b'.*>= 1, or -1"),
        ('{ name: "b" data_type: TYPE_FP32 dims: [ -2 ] }', r"input 'b'.*>= 1, or -1"),
        ('{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }', "more than once"),
        (
            '{ name: "b" data_type: TYPE_FP32 dims: [ 2, 3 ] reshape { shape: [ 5 ] } }',
            "has different size for dims and reshape for m",
        ),
        ('{ name: "b" data_type: TYPE_FP32 dims: [ 4 ] format: FORMAT_NHWC }', "3 dims"),
    ],
)
def test_invalid_inputs(tensor: str, match: str) -> None:
    _expect_invalid(MINIMAL + f" input [ {tensor} ]", match, name="m")


def test_invalid_model_level_settings() -> None:
    """Triton's sentences (model_config_utils.cc), first and exactly; a hint may follow."""
    _expect_invalid(
        MINIMAL.replace("max_batch_size: 8", "max_batch_size: -1"),
        "^'max_batch_size' must be non-negative value for m",
        name="m",
    )
    _expect_invalid(
        MINIMAL + " dynamic_batching { preferred_batch_size: [ 16 ] }",
        "^dynamic batching preferred size must be <= max batch size for m; got 16 > max_batch_size 8",
        name="m",
    )
    _expect_invalid(
        MINIMAL.replace("max_batch_size: 8", "max_batch_size: 0") + " dynamic_batching { preferred_batch_size: [ 2 ] }",
        "max_batch_size 0",
        name="m",
    )
    _expect_invalid(MINIMAL + " version_policy { specific { versions: [ 0 ] } }", "versions' must be >= 1", name="m")
    _expect_invalid(
        MINIMAL + " instance_group [ { count: 1 kind: KIND_CPU gpus: [ 0 ] } ]",
        "^instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        name="m",
    )
    _expect_invalid(MINIMAL + " instance_group [ { kind: KIND_GPU } ]", "KIND_GPU but no GPUs", name="m")
    _expect_invalid(
        'platform: "onnxruntime_onnx" backend: "pytorch"' + MINIMAL[17:],
        "^unexpected 'platform' and 'backend' pair, got:onnxruntime_onnx, pytorch",
        name="m",
    )
    _expect_invalid(MINIMAL.replace('backend: "python"', ""), "^unexpected platform type '' for m", name="m")


def test_model_name_must_match_directory() -> None:
    config = parse_config_text('name: "y"' + MINIMAL, "test")
    with pytest.raises(ConfigError, match="config.pbtxt names the model 'y'.*directory"):
        normalize(config, "x", "model.py")


def test_normalize_defaults() -> None:
    config = _normalized(
        MINIMAL + " instance_group [ { count: 3 }, { kind: KIND_AUTO } ] dynamic_batching { }", name="m"
    )
    validate(config)
    assert config.name == "m"
    assert config.version_policy.latest.num_versions == 1
    assert config.default_model_filename == "model.py"
    assert [(g.name, g.count) for g in config.instance_group] == [("m_0", 3), ("m_1", 1)]
    kinds = {
        ModelConfig.DESCRIPTOR.fields_by_name["instance_group"]
        .message_type.enum_types_by_name["Kind"]
        .values_by_number[g.kind]
        .name
        for g in config.instance_group
    }
    assert kinds == {"KIND_CPU"}
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.optimization.input_pinned_memory.enable is True
    # No instance_group at all: Triton names the one it adds after the model.
    implicit = parse_config_text(MINIMAL, "t")
    normalize(implicit, "m", "model.onnx", default_cpu_instance_count=2)
    assert [(g.name, g.count) for g in implicit.instance_group] == [("m", 2)]
    sequence = _normalized(SEQUENCE.replace("max_sequence_idle_microseconds: 5000000", ""))
    assert sequence.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    validate(sequence)


def test_normalize_with_gpus() -> None:
    config = parse_config_text(
        MINIMAL + " instance_group [ { kind: KIND_AUTO }, { kind: KIND_AUTO gpus: [ 5 ] } ]", "t"
    )
    normalize(config, "m", "model.py", available_gpus=[0, 1])
    assert [list(g.gpus) for g in config.instance_group] == [[0, 1], [5]]
    assert [g.kind for g in config.instance_group] == [1, 2]  # GPU, then CPU: gpu 5 is absent


def test_platform_and_backend_are_filled_both_ways() -> None:
    onnx = _normalized(MINIMAL.replace('backend: "python"', 'backend: "onnxruntime"'), name="m", filename="model.onnx")
    assert (onnx.platform, onnx.default_model_filename) == ("onnxruntime_onnx", "model.onnx")
    torch = _normalized(
        MINIMAL.replace('backend: "python"', 'platform: "pytorch_libtorch"'), name="m", filename="model.pt"
    )
    assert torch.backend == "pytorch"
    python = _normalized(MINIMAL, name="m")
    assert (python.platform, python.backend) == ("", "python")
    ensemble = _normalized(ENSEMBLE, filename="")
    validate(ensemble)
    assert (ensemble.backend, ensemble.default_model_filename) == ("", "")
    assert not ensemble.instance_group and not ensemble.HasField("optimization")


@pytest.mark.parametrize(
    ("platform", "backend"),
    [
        ("onnxruntime_onnx", "onnxruntime"),
        ("pytorch_libtorch", "pytorch"),
        ("tensorrt_plan", "tensorrt"),
        ("tensorflow_graphdef", "tensorflow"),
        ("tensorflow_savedmodel", "tensorflow"),
        ("ensemble", ""),
        ("something_else", ""),
    ],
)
def test_backend_for_platform(platform: str, backend: str) -> None:
    assert backend_for(ModelConfig(platform=platform)) == backend
    assert backend_for(ModelConfig(platform=platform, backend="custom")) == "custom"


def test_platform_for_backend() -> None:
    assert platform_for("onnxruntime") == "onnxruntime_onnx"
    assert platform_for("pytorch") == "pytorch_libtorch"
    assert platform_for("tensorrt") == "tensorrt_plan"
    assert platform_for("tensorflow", "model.graphdef") == "tensorflow_graphdef"
    assert platform_for("tensorflow") == "tensorflow_savedmodel"
    assert platform_for("python") == platform_for("openvino") == ""


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [7]),
        ("version_policy { latest { num_versions: 2 } }", [3, 7]),
        ("version_policy { latest { num_versions: 9 } }", [1, 2, 3, 7]),
        ("version_policy { all { } }", [1, 2, 3, 7]),
        ("version_policy { specific { versions: [ 2, 5, 1 ] } }", [1, 2]),
    ],
)
def test_version_policy_select(policy: str, expected: list[int]) -> None:
    config = parse_config_text(policy, "t")
    assert version_policy_select(config, [3, 1, 7, 2]) == expected


def test_load_config(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    assert load_config(model) is None
    (model / "config.pbtxt").write_text(MINIMAL)
    assert load_config(model).max_batch_size == 8
    (model / "configs").mkdir()
    (model / "configs" / "big.pbtxt").write_text(MINIMAL.replace("8", "64", 1))
    assert load_config(model, "big").max_batch_size == 64
    assert load_config(model, "absent").max_batch_size == 8
    (model / "config.pbtxt").write_text("max_batch: 1")
    with pytest.raises(ConfigError, match=r"^model 'm': config.pbtxt line 1 column 1: unknown"):
        load_config(model)


def test_json_round_trip() -> None:
    config = _normalized(REALISTIC, filename="model.onnx")
    doc = config_to_json(config)
    assert doc["input"][0]["dims"] == [3, 224, 224]  # int64 as numbers, as Triton prints
    assert doc["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    assert doc["dynamic_batching"]["priority_queue_policy"]["1"]["max_queue_size"] == 4
    assert doc["model_warmup"][0]["inputs"]["image"]["dims"] == [3, 224, 224]
    assert doc["input"][1]["is_shape_tensor"] is False  # defaults are printed
    assert config_from_json(doc, "t") == config
    assert config_from_json(json.dumps(doc), "t") == config
    assert json.loads(config_to_json_bytes(config)) == doc
    assert config_to_json(ModelConfig()) == {}


def test_config_from_json_errors() -> None:
    with pytest.raises(ConfigError, match="^load request: invalid model configuration JSON"):
        config_from_json({"max_batch": 1}, "load request")
    with pytest.raises(ConfigError, match="TYPE_X"):
        config_from_json({"input": [{"data_type": "TYPE_X"}]}, "load request")
    with pytest.raises(ConfigError):
        config_from_json("{not json", "load request")


# --- the JSON real Triton printed --------------------------------------------------------

# The configs served by Triton 2.51 to record TRITON_JSON (each with a 1/model.py that copies its
# inputs to its outputs). "plain" has no name and no instance_group.
TRITON_CONFIGS = {
    "plain": """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
""",
    "rich": """
name: "rich"
backend: "python"
max_batch_size: 16
version_policy: { specific: { versions: [ 1 ] } }
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] format: FORMAT_NONE },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 1 ] optional: false allow_ragged_batch: false }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "" },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [
  { count: 2 kind: KIND_CPU },
  { kind: KIND_AUTO }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 5000 max_queue_size: 10 }
  priority_queue_policy {
    key: 2
    value: { timeout_action: DELAY default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 5 }
  }
}
parameters { key: "p1" value: { string_value: "v1" } }
parameters: { key: "p2" value: { string_value: "2" } }
model_warmup [
  {
    name: "warm"
    batch_size: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_STRING dims: [ 1 ] random_data: true } }
  }
]
optimization {
  priority: PRIORITY_MAX
  execution_accelerators {
    cpu_execution_accelerator: [ { name: "openvino" parameters { key: "threads" value: "4" } } ]
  }
}
response_cache { enable: false }
model_transaction_policy { decoupled: false }
""",
    "seq": """
name: "seq"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 200 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] initial_state: { name: "init" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } ]
}
instance_group [ { name: "grp" count: 1 kind: KIND_CPU } ]
""",
    "ens": """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [ { model_name: "plain" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ]
}
""",
}


# JSON that real Triton 2.51 (CPU, Python backend) returned for GET /v2/models/<m>/config
# with the configs above. Only the ensemble differs from ours: newer Triton schemas (25.11+)
# add ensemble_scheduling.max_inflight_requests, which inferd prints and 2.51 did not know.
TRITON_JSON = {
    "plain": """
        {"name": "plain", "platform": "", "backend": "python", "runtime": "", "version_policy":
        {"latest": {"num_versions": 1}}, "max_batch_size": 8, "input": [{"name": "INPUT0",
        "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [-1], "is_shape_tensor":
        false, "allow_ragged_batch": false, "optional": false, "is_non_linear_format_io":
        false}], "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1],
        "label_filename": "", "is_shape_tensor": false, "is_non_linear_format_io": false}],
        "batch_input": [], "batch_output": [], "optimization": {"priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": {"enable": true}, "output_pinned_memory": {"enable": true},
        "gather_kernel_buffer_threshold": 0, "eager_batching": false}, "instance_group":
        [{"name": "plain", "kind": "KIND_CPU", "count": 1, "gpus": [], "secondary_devices": [],
        "profile": [], "passive": false, "host_policy": ""}], "default_model_filename":
        "model.py", "cc_model_filenames": {}, "metric_tags": {}, "parameters": {},
        "model_warmup": []}
    """,
    "rich": """
        {"name": "rich", "platform": "", "backend": "python", "runtime": "", "version_policy":
        {"specific": {"versions": [1]}}, "max_batch_size": 16, "input": [{"name": "INPUT0",
        "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [4], "is_shape_tensor":
        false, "allow_ragged_batch": false, "optional": false, "is_non_linear_format_io":
        false}, {"name": "INPUT1", "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims":
        [1], "is_shape_tensor": false, "allow_ragged_batch": false, "optional": false,
        "is_non_linear_format_io": false}], "output": [{"name": "OUTPUT0", "data_type":
        "TYPE_FP32", "dims": [4], "label_filename": "", "is_shape_tensor": false,
        "is_non_linear_format_io": false}, {"name": "OUTPUT1", "data_type": "TYPE_STRING",
        "dims": [1], "label_filename": "", "is_shape_tensor": false, "is_non_linear_format_io":
        false}], "batch_input": [], "batch_output": [], "optimization": {"priority":
        "PRIORITY_MAX", "execution_accelerators": {"gpu_execution_accelerator": [],
        "cpu_execution_accelerator": [{"name": "openvino", "parameters": {"threads": "4"}}]},
        "input_pinned_memory": {"enable": true}, "output_pinned_memory": {"enable": true},
        "gather_kernel_buffer_threshold": 0, "eager_batching": false}, "dynamic_batching":
        {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100,
        "preserve_ordering": false, "priority_levels": 2, "default_priority_level": 1,
        "default_queue_policy": {"timeout_action": "REJECT", "default_timeout_microseconds":
        5000, "allow_timeout_override": false, "max_queue_size": 10}, "priority_queue_policy":
        {"2": {"timeout_action": "DELAY", "default_timeout_microseconds": 1000,
        "allow_timeout_override": true, "max_queue_size": 5}}}, "instance_group": [{"name":
        "rich_0", "kind": "KIND_CPU", "count": 2, "gpus": [], "secondary_devices": [],
        "profile": [], "passive": false, "host_policy": ""}, {"name": "rich_1", "kind":
        "KIND_CPU", "count": 1, "gpus": [], "secondary_devices": [], "profile": [], "passive":
        false, "host_policy": ""}], "default_model_filename": "model.py", "cc_model_filenames":
        {}, "metric_tags": {}, "parameters": {"p2": {"string_value": "2"}, "p1":
        {"string_value": "v1"}}, "model_warmup": [{"name": "warm", "batch_size": 2, "inputs":
        {"INPUT1": {"data_type": "TYPE_STRING", "dims": [1], "random_data": true}, "INPUT0":
        {"data_type": "TYPE_FP32", "dims": [4], "zero_data": true}}, "count": 0}],
        "model_transaction_policy": {"decoupled": false}, "response_cache": {"enable": false}}
    """,
    "seq": """
        {"name": "seq", "platform": "", "backend": "python", "runtime": "", "version_policy":
        {"latest": {"num_versions": 1}}, "max_batch_size": 4, "input": [{"name": "INPUT0",
        "data_type": "TYPE_INT32", "format": "FORMAT_NONE", "dims": [1], "is_shape_tensor":
        false, "allow_ragged_batch": false, "optional": false, "is_non_linear_format_io":
        false}], "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1],
        "label_filename": "", "is_shape_tensor": false, "is_non_linear_format_io": false}],
        "batch_input": [], "batch_output": [], "optimization": {"priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": {"enable": true}, "output_pinned_memory": {"enable": true},
        "gather_kernel_buffer_threshold": 0, "eager_batching": false}, "sequence_batching":
        {"oldest": {"max_candidate_sequences": 4, "preferred_batch_size": [4],
        "max_queue_delay_microseconds": 200, "preserve_ordering": false},
        "max_sequence_idle_microseconds": 1000000, "control_input": [{"name": "START",
        "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [],
        "fp32_false_true": [0, 1], "bool_false_true": [], "data_type": "TYPE_INVALID"}]},
        {"name": "READY", "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0,
        1], "fp32_false_true": [], "bool_false_true": [], "data_type": "TYPE_INVALID"}]},
        {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "int32_false_true":
        [], "fp32_false_true": [], "bool_false_true": [], "data_type": "TYPE_UINT64"}]}],
        "state": [{"input_name": "IN_STATE", "output_name": "OUT_STATE", "data_type":
        "TYPE_INT32", "dims": [1], "initial_state": [{"data_type": "TYPE_INT32", "dims": ["1"],
        "name": "init", "zero_data": true}], "use_same_buffer_for_input_output": false,
        "use_growable_memory": false}], "iterative_sequence": false}, "instance_group":
        [{"name": "grp", "kind": "KIND_CPU", "count": 1, "gpus": [], "secondary_devices": [],
        "profile": [], "passive": false, "host_policy": ""}], "default_model_filename":
        "model.py", "cc_model_filenames": {}, "metric_tags": {}, "parameters": {},
        "model_warmup": []}
    """,
    "ens": """
        {"name": "ens", "platform": "ensemble", "backend": "", "runtime": "", "version_policy":
        {"latest": {"num_versions": 1}}, "max_batch_size": 8, "input": [{"name": "IN",
        "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [-1], "is_shape_tensor":
        false, "allow_ragged_batch": false, "optional": false, "is_non_linear_format_io":
        false}], "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1],
        "label_filename": "", "is_shape_tensor": false, "is_non_linear_format_io": false}],
        "batch_input": [], "batch_output": [], "ensemble_scheduling": {"step": [{"model_name":
        "plain", "model_version": -1, "input_map": {"INPUT0": "IN"}, "output_map": {"OUTPUT0":
        "OUT"}, "model_namespace": ""}]}, "instance_group": [], "default_model_filename": "",
        "cc_model_filenames": {}, "metric_tags": {}, "parameters": {}, "model_warmup": [],
        "model_transaction_policy": {"decoupled": false}}
    """,
}


@pytest.mark.parametrize("model", sorted(TRITON_CONFIGS))
def test_config_json_matches_triton(model: str) -> None:
    config = parse_config_text(TRITON_CONFIGS[model], f"model '{model}': config.pbtxt")
    normalize(config, model, "" if model == "ens" else "model.py")
    validate(config)
    expected = json.loads(TRITON_JSON[model])
    if model == "ens":
        expected["ensemble_scheduling"]["max_inflight_requests"] = 0
    assert config_to_json(config) == expected
    # Same JSON types too (1 not 1.0, "1" where Triton leaves an int64 as a string).
    assert json.dumps(config_to_json(config), sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_model_parameters_typed_values_and_errors() -> None:
    from inferd.config import ModelParameters

    config = parse_config_text(
        'name: "m"\n'
        'parameters { key: "on" value { string_value: "Yes" } }\n'
        'parameters { key: "n" value { string_value: " 12 " } }\n'
        'parameters { key: "x" value { string_value: "0.25" } }\n'
        'parameters { key: "bad" value { string_value: "maybe" } }\n',
        "config.pbtxt",
    )
    params = ModelParameters(config)
    assert dict(params) == {"on": "Yes", "n": " 12 ", "x": "0.25", "bad": "maybe"}
    assert params.flag("on", False) is True and params.flag("absent", None) is None
    assert params.integer("n", 0) == 12 and params.number("x", 1.0) == 0.25
    with pytest.raises(ConfigError, match="model 'm': parameter bad must be true or false, got 'maybe'"):
        params.flag("bad", False)
    with pytest.raises(ConfigError, match="parameter bad must be an integer"):
        params.integer("bad", 0)
