"""Engine description, profile choice, config auto-complete and checks, on a fake engine (no GPU)."""

from __future__ import annotations

import pytest

from inferd.config import config_to_json, parse_config_text
from inferd.contracts.errors import ConfigError, InvalidArgument, Unsupported
from inferd_backend_tensorrt.autocomplete import autocomplete, check_config
from inferd_backend_tensorrt.dtypes import TRT_TO_WIRE, WIRE_TO_TRT, config_type, trt_name, wire_from_trt
from inferd_backend_tensorrt.engine import choose_profile, describe, profile_indices

from .fakes import FakeEngine, FakeTensor, Member, batch_engine, static_engine


def _config(text: str = ""):
    return parse_config_text('name: "m"\n' + text, "test")


def test_dtype_table():
    assert TRT_TO_WIRE == {
        "FLOAT": "FP32", "HALF": "FP16", "BF16": "BF16", "INT8": "INT8", "UINT8": "UINT8",
        "INT32": "INT32", "INT64": "INT64", "BOOL": "BOOL",
    }  # fmt: skip
    assert WIRE_TO_TRT["FP32"] == "FLOAT"
    assert wire_from_trt(Member("HALF")) == "FP16"
    assert wire_from_trt("DataType.FP8") is None and wire_from_trt(Member("INT4")) is None
    assert trt_name("DataType.BOOL") == "BOOL"
    assert config_type("FP16") == "TYPE_FP16"


def test_describe_reads_io_and_profiles():
    info = describe(batch_engine())
    assert [t.name for t in info.inputs] == ["INPUT0", "INPUT1"]
    assert [t.name for t in info.outputs] == ["OUTPUT0", "OUTPUT1"]
    first = info.get("INPUT0")
    assert first is not None and first.datatype == "FP32" and first.shape == (-1, 4)
    assert first.profiles[1].max == (16, 4)
    assert info.dynamic and info.can_batch() and info.num_profiles == 2
    assert info.max_batch_size([0]) == 8 and info.max_batch_size([1]) == 16 and info.max_batch_size([0, 1]) == 16
    static = describe(static_engine())
    assert not static.dynamic and not static.can_batch() and static.max_batch_size([0]) == 0


def test_choose_profile_fits_the_shapes():
    info = describe(batch_engine())
    shapes = {"INPUT0": (2, 4), "INPUT1": (2,)}
    assert choose_profile(info, [0, 1], shapes, "m") == 0
    assert choose_profile(info, [0, 1], {"INPUT0": (12, 4), "INPUT1": (12,)}, "m") == 1
    assert choose_profile(info, [0, 1], {"INPUT0": (7, 4), "INPUT1": (7,)}, "m") == 1  # closer to opt 8 than 4
    with pytest.raises(
        InvalidArgument, match=r"no optimization profile .* INPUT0 \[20, 4\].*profile 1: INPUT0 \[4, 4\]..\[16, 4\]"
    ):
        choose_profile(info, [0, 1], {"INPUT0": (20, 4), "INPUT1": (20,)}, "m")


def test_profile_indices_from_instance_groups():
    config = _config('instance_group [{ kind: KIND_GPU profile: ["1"] }, { kind: KIND_GPU profile: ["0", "1"] }]')
    assert profile_indices(config.instance_group, 2, "m") == [0, 1]
    assert profile_indices(_config().instance_group, 2, "m") == [0]
    with pytest.raises(InvalidArgument, match="names optimization profile 3, but the engine has 2"):
        profile_indices(_config('instance_group [{ profile: ["3"] }]').instance_group, 2, "m")
    with pytest.raises(InvalidArgument, match="profile 'x' is not a number"):
        profile_indices(_config('instance_group [{ profile: ["x"] }]').instance_group, 2, "m")


def test_autocomplete_fills_everything():
    config = _config()
    autocomplete(config, describe(batch_engine()), gpus=[0, 1])
    js = config_to_json(config)
    assert js["max_batch_size"] == 8  # profile 0 only, Triton's default
    assert "dynamic_batching" in js
    assert [(i["name"], i["data_type"], i["dims"]) for i in js["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_INT32", [1]),
    ]  # fmt: skip
    assert js["input"][1]["reshape"] == {"shape": []}  # a batch of scalars
    assert [(o["name"], o["data_type"]) for o in js["output"]] == [("OUTPUT0", "TYPE_FP32"), ("OUTPUT1", "TYPE_INT64")]
    assert [(g["kind"], g["gpus"]) for g in js["instance_group"]] == [("KIND_GPU", [0, 1])]
    check_config(config, describe(batch_engine()))


def test_autocomplete_uses_the_groups_profiles():
    config = _config('instance_group [{ kind: KIND_GPU gpus: [0] profile: ["1"] }]')
    autocomplete(config, describe(batch_engine()), gpus=[0])
    assert config.max_batch_size == 16
    assert check_config(config, describe(batch_engine())) == [1]


def test_autocomplete_config_dims_hint_no_batching():
    config = _config('input [{ name: "INPUT0" dims: [-1, 4] }]')
    autocomplete(config, describe(batch_engine()), gpus=[0])
    assert config.max_batch_size == 0
    assert [list(i.dims) for i in config.input] == [[-1, 4]]
    assert config.WhichOneof("scheduling_choice") is None


def test_autocomplete_static_engine_does_not_batch():
    config = _config()
    autocomplete(config, describe(static_engine()), gpus=[0])
    assert config.max_batch_size == 0
    assert [(i.name, list(i.dims)) for i in config.input] == [("X", [2, 3])]
    assert config_to_json(config)["output"][0]["data_type"] == "TYPE_FP16"


def test_autocomplete_refuses_a_larger_max_batch_size():
    with pytest.raises(
        ConfigError,
        match="max_batch_size 32, but the engine's optimization profiles \\[0\\] accept batches of at most 8",
    ):
        autocomplete(_config("max_batch_size: 32"), describe(batch_engine()), gpus=[0])
    with pytest.raises(ConfigError, match="the engine does not batch"):
        autocomplete(_config('input [{ name: "X" dims: [3] }]'), describe(static_engine()), gpus=[0])


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("instance_group [{ kind: KIND_CPU }]", InvalidArgument, "kind KIND_CPU; TensorRT engines run only on GPUs"),
        (
            'input [{ name: "INPUT0" data_type: TYPE_FP16 dims: [4] }]',
            InvalidArgument,
            "input 'INPUT0' is TYPE_FP16 in the config, but the engine's tensor is FLOAT",
        ),
        (
            'input [{ name: "NOPE" data_type: TYPE_FP32 dims: [4] }]',
            InvalidArgument,
            "config input 'NOPE' is not an input of the engine; engine inputs: INPUT0, INPUT1",
        ),
        (
            'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4, 1] }]',
            InvalidArgument,
            r"tensor 'INPUT0': the engine expects shape \[-1, 4\], but the config gives \[-1, 4, 1\]",
        ),
        (
            'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]',
            InvalidArgument,
            r"the engine needs input\(s\) \['INPUT1'\], which the config does not declare",
        ),
    ],
)
def test_check_config_errors(text, error, match):
    config = _config("max_batch_size: 8\ninstance_group [{ kind: KIND_GPU gpus: [0] }]\n" + text)
    if "KIND_CPU" in text:
        config = _config("max_batch_size: 8\n" + text)
    with pytest.raises(error, match=match):
        check_config(config, describe(batch_engine()))


def test_check_config_batch_limits():
    both = _config('max_batch_size: 12\ninstance_group [{ kind: KIND_GPU gpus: [0] profile: ["0", "1"] }]')
    autocomplete(both, describe(batch_engine()), gpus=[0])
    assert check_config(both, describe(batch_engine())) == [0, 1]
    first = _config('max_batch_size: 12\ninstance_group [{ kind: KIND_GPU gpus: [0] profile: ["1"] }]')
    autocomplete(first, describe(batch_engine()), gpus=[0])
    first.instance_group[0].profile[:] = ["0"]
    with pytest.raises(
        InvalidArgument, match=r"max_batch_size is 12, but the optimization profiles \[0\] accept batches of at most 8"
    ):
        check_config(first, describe(batch_engine()))
    static = _config("max_batch_size: 2\ninstance_group [{ kind: KIND_GPU gpus: [0] }]")
    with pytest.raises(InvalidArgument, match="no dynamic first dimension"):
        check_config(static, describe(static_engine()))


def test_unsupported_tensors():
    fp8 = FakeEngine([FakeTensor("X", "INPUT", "FP8", (-1, 2), [((1, 2), (1, 2), (4, 2))]),
                      FakeTensor("Y", "OUTPUT", "FLOAT", (-1, 2))])  # fmt: skip
    config = _config("instance_group [{ kind: KIND_GPU gpus: [0] }]")
    with pytest.raises(Unsupported, match="TensorRT datatype FP8, which the inference protocol cannot carry"):
        check_config(config, describe(fp8))
    shape = FakeEngine(
        [FakeTensor("S", "INPUT", "INT32", (2,), shape_tensor=True), FakeTensor("Y", "OUTPUT", "FLOAT", (-1,))]
    )
    with pytest.raises(Unsupported, match="'S' is a shape tensor"):
        check_config(config, describe(shape))
