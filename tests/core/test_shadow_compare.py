"""The shadow's comparison rules and its config (docs/traffic.md, "Shadow traffic"): exact for
integer, BOOL and BYTES outputs, within atol + rtol x |serving| for floats; what a shadow spec
and the ``shadow_*`` parameters accept."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inferd.config import ModelParameters
from inferd.config.parse import parse_config_text
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferResponse, InferTensor
from inferd.engine.shadow import ShadowPolicy, compare, parse_shadow


def answer(*tensors: tuple[str, object, str | None]) -> InferResponse:
    return InferResponse("m", "1", outputs=[InferTensor.from_array(n, np.asarray(a), d) for n, a, d in tensors])


def test_integers_bool_and_bytes_must_be_equal() -> None:
    serving = answer(("Y", np.array([1, 2, 3], np.int32), None), ("S", np.array([b"a", b"b"], object), "BYTES"))
    assert compare(serving, serving, 1.0, 1.0) == (True, 0.0, "")
    off = answer(("Y", np.array([1, 2, 5], np.int32), None), ("S", np.array([b"a", b"b"], object), "BYTES"))
    assert compare(serving, off, 10.0, 10.0) == (False, 2.0, "output 'Y': max abs difference 2")  # no tolerance
    text = answer(("Y", np.array([1, 2, 3], np.int32), None), ("S", np.array([b"a", b"c"], object), "BYTES"))
    agree, diff, why = compare(serving, text, 1.0, 1.0)
    assert not agree and math.isinf(diff) and why == "output 'S': values differ"
    flags = answer(("B", np.array([True, False]), None))
    assert not compare(flags, answer(("B", np.array([True, True]), None)), 1.0, 1.0)[0]


def test_floats_agree_within_atol_plus_rtol_of_the_serving_value() -> None:
    serving = answer(("F", np.array([100.0, 0.0, np.nan], np.float32), None))
    # |d| <= 1e-6 + 1e-5 * |serving|: 100 may move by 0.001001, 0 by 1e-6; NaN matches NaN
    near = answer(("F", np.array([100.001, 9e-7, np.nan], np.float32), None))
    agree, diff, _ = compare(serving, near, 1e-6, 1e-5)
    assert agree and diff == pytest.approx(0.001, rel=0.01)
    far = answer(("F", np.array([100.0, 2e-6, np.nan], np.float32), None))
    agree, diff, why = compare(serving, far, 1e-6, 1e-5)
    assert not agree and diff == pytest.approx(2e-6, rel=1e-3) and why.startswith("output 'F': max abs difference")
    nan = answer(("F", np.array([100.0, 0.0, 1.0], np.float32), None))
    agree, diff, _ = compare(serving, nan, 1e-6, 1e-5)
    assert not agree and math.isinf(diff)


def test_missing_outputs_and_other_shapes_or_datatypes_disagree() -> None:
    serving = answer(("Y", np.array([1, 2], np.int32), None))
    assert compare(serving, answer(("Z", np.array([1, 2], np.int32), None)), 0, 0)[2] == "output 'Y' missing"
    shaped = compare(serving, answer(("Y", np.array([[1, 2]], np.int32), None)), 0, 0)
    assert shaped[0] is False and shaped[2] == "output 'Y': INT32 [1, 2] where the serving version answered INT32 [2]"
    typed = compare(serving, answer(("Y", np.array([1, 2], np.int64), None)), 0, 0)
    assert typed[0] is False and "INT64" in typed[2]
    # an output only the shadow has is not compared (the client never sees it)
    assert compare(serving, answer(("Y", np.array([1, 2], np.int32), None), ("X", np.array([0]), None)), 0, 0)[0]


@pytest.mark.parametrize(
    ("text", "parsed"), [("2", (2, 100.0)), ("2:25", (2, 25.0)), (" 12 : 0.5 ", (12, 0.5)), ("", None), ("off", None)]
)
def test_shadow_specs(text: str, parsed: tuple[int, float] | None) -> None:
    assert parse_shadow(text, "m") == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("02", "must be VERSION or VERSION:PERCENT"),
        ("x:5", "must be VERSION or VERSION:PERCENT"),
        ("-1", "must be VERSION or VERSION:PERCENT"),
        ("2:101", "percent must be a number from 0 to 100, got '101'"),
        ("2:abc", "percent must be a number from 0 to 100, got 'abc'"),
        ("2:nan", "percent must be a number from 0 to 100"),
    ],
)
def test_bad_shadow_specs_name_the_model(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_shadow(text, "m")
    assert caught.value.message.startswith("model 'm': traffic_shadow") and message in caught.value.message


def params(**values: str) -> ModelParameters:
    lines = "\n".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items())
    return ModelParameters(parse_config_text(f'name: "m"\nbackend: "python"\n{lines}\n', "config.pbtxt"), "m")


def test_the_shadow_policy_from_config_and_its_limits() -> None:
    assert ShadowPolicy.from_config(params()) == ShadowPolicy()
    policy = ShadowPolicy.from_config(params(shadow_atol="0.01", shadow_min_requests="10", shadow_advance="false"))
    assert (policy.atol, policy.min_requests, policy.advance) == (0.01, 10, False)
    for bad in (
        {"shadow_atol": "-1"},
        {"shadow_min_requests": "0"},
        {"shadow_max_disagreement": "2"},
        {"shadow_queue": "0"},
    ):
        with pytest.raises(ValueError, match="shadow_atol and shadow_rtol must be >= 0"):
            ShadowPolicy.from_config(params(**bad))
