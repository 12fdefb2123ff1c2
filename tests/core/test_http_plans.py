"""A repeated binary request header is decoded from its kept plan, to the same request and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.http.codec import decode_request, parse_json
from inferd.frontends.http.plans import HeaderPlans


def _header(**extra: object) -> bytes:
    head = {
        "id": "r1",
        "parameters": {"priority": 1, "binary_data_output": True},
        "inputs": [
            {"name": "A", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}},
            {"name": "B", "datatype": "INT32", "shape": [1, 1], "parameters": {"binary_data_size": 4, "x": "y"}},
        ],
        "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
        **extra,
    }
    return json.dumps(head).encode()


def _binary(a: list[float], b: int) -> memoryview:
    return memoryview(np.array(a, np.float32).tobytes() + np.array([b], np.int32).tobytes())


def _fields(request: object) -> tuple[object, ...]:
    r = request
    inputs = [(t.name, t.datatype, t.shape, t.data.tolist(), t.parameters) for t in r.inputs.values()]  # type: ignore[attr-defined]
    outputs = [(o.name, o.parameters) for o in r.outputs]  # type: ignore[attr-defined]
    return r.model_name, r.model_version, r.id, r.parameters, inputs, outputs  # type: ignore[attr-defined]


def test_a_kept_header_gives_the_request_a_fresh_decode_gives() -> None:
    plans = HeaderPlans()
    first, flag = plans.decode(memoryview(_header()), _binary([1, 2], 3), "m", "")
    assert len(plans) == 1 and flag is True
    first.parameters["changed"] = True  # a later request must not see it
    first.outputs[0].parameters["binary_data"] = False
    second, flag2 = plans.decode(_header(), _binary([5, 6], 7), "m", "2")
    fresh, flag3 = decode_request(parse_json(_header(), "request"), _binary([5, 6], 7), "m", "2")
    assert _fields(second) == _fields(fresh)
    assert _fields(second)[4][0][3] == [[5.0, 6.0]]
    assert flag2 is flag3 is True
    assert second.parameters == {"priority": 1}


@pytest.mark.parametrize("binary", [_binary([1], 0)[:8], memoryview(bytes(16)), memoryview(bytes(13))])
def test_a_kept_header_fails_on_a_wrong_binary_part_as_a_fresh_decode(binary: memoryview) -> None:
    plans = HeaderPlans()
    plans.decode(_header(), _binary([1, 2], 3), "m", "")
    with pytest.raises(InvalidArgument) as kept:
        plans.decode(_header(), binary, "m", "")
    with pytest.raises(InvalidArgument) as fresh:
        decode_request(parse_json(_header(), "request"), binary, "m", "")
    assert kept.value.message == fresh.value.message


def test_headers_with_json_data_or_nested_parameters_or_errors_are_not_kept() -> None:
    plans = HeaderPlans()
    data = {"inputs": [{"name": "A", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    plans.decode(json.dumps(data).encode(), memoryview(b""), "m", "")
    nested = _header(parameters={"tags": ["a"]})  # refused, as Triton refuses it
    with pytest.raises(InvalidArgument, match="^parameter 'tags' has invalid type"):
        plans.decode(nested, _binary([1, 2], 3), "m", "")
    with pytest.raises(InvalidArgument):
        plans.decode(_header(), memoryview(b""), "m", "")
    assert len(plans) == 0


def test_the_plans_are_bounded() -> None:
    plans = HeaderPlans(limit=2)
    for i in range(5):
        plans.decode(_header(id=f"r{i}"), _binary([1, 2], 3), "m", "")
        assert len(plans) <= 2
