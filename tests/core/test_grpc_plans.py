"""A repeated ModelInfer header is decoded from its kept plan, to the same request and errors."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.codec import decode_request, split_infer_request
from inferd.frontends.grpc.plans import RequestPlans

Tensor = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor


def _message(a: list[float], b: int, raw: list[bytes] | None = None, rid: str = "r1") -> bytes:
    request = pb.ModelInferRequest(
        model_name="m",
        model_version="2",
        id=rid,
        inputs=[Tensor(name="A", datatype="FP32", shape=[1, 2]), Tensor(name="B", datatype="INT32", shape=[1, 1])],
        outputs=[Output(name="OUT")],
        raw_input_contents=raw
        if raw is not None
        else [np.array(a, np.float32).tobytes(), np.array([b], np.int32).tobytes()],
    )
    return request.SerializeToString()


def _fields(r: object) -> tuple[object, ...]:
    inputs = [(t.name, t.datatype, t.shape, t.data.tolist(), t.parameters) for t in r.inputs.values()]  # type: ignore[attr-defined]
    outputs = [(o.name, o.parameters) for o in r.outputs]  # type: ignore[attr-defined]
    return r.model_name, r.model_version, r.id, r.parameters, inputs, outputs  # type: ignore[attr-defined]


def test_a_kept_header_gives_the_request_a_fresh_decode_gives() -> None:
    plans = RequestPlans()
    first = plans.decode(split_infer_request(_message([1, 2], 3)))
    assert len(plans) == 1
    first.outputs[0].parameters["changed"] = True  # a later request must not see it
    first.inputs["A"].parameters["changed"] = True
    second = plans.decode(split_infer_request(_message([5, 6], 7)))
    fresh = decode_request(split_infer_request(_message([5, 6], 7)))
    assert _fields(second) == _fields(fresh)
    assert _fields(second)[4] == [("A", "FP32", (1, 2), [[5.0, 6.0]], {}), ("B", "INT32", (1, 1), [[7]], {})]
    assert len(plans) == 1


@pytest.mark.parametrize(
    "raw",
    [
        [bytes(4), bytes(4)],  # A short
        [bytes(8), bytes(8)],  # B long
        [bytes(8)],  # one raw_input_contents for two inputs
        [bytes(8), bytes(4), bytes(4)],  # three
    ],
)
def test_a_kept_header_fails_on_wrong_tensor_bytes_as_a_fresh_decode(raw: list[bytes]) -> None:
    plans = RequestPlans()
    plans.decode(split_infer_request(_message([1, 2], 3)))
    with pytest.raises(InvalidArgument) as kept:
        plans.decode(split_infer_request(_message([], 0, raw=raw)))
    with pytest.raises(InvalidArgument) as fresh:
        decode_request(split_infer_request(_message([], 0, raw=raw)))
    assert kept.value.message == fresh.value.message


def _with_parameters() -> bytes:
    request = pb.ModelInferRequest.FromString(_message([1, 2], 3))
    request.parameters["sequence_id"].int64_param = 5
    return request.SerializeToString()


def _with_input_parameter() -> bytes:
    request = pb.ModelInferRequest.FromString(_message([1, 2], 3))
    request.inputs[0].parameters["x"].string_param = "y"
    return request.SerializeToString()


def _with_output_parameter() -> bytes:
    request = pb.ModelInferRequest.FromString(_message([1, 2], 3))
    request.outputs[0].parameters["classification"].int64_param = 2
    return request.SerializeToString()


def _typed_contents() -> bytes:
    request = pb.ModelInferRequest(
        model_name="m",
        inputs=[Tensor(name="A", datatype="FP32", shape=[1, 2], contents=pb.InferTensorContents(fp32_contents=[1, 2]))],
    )
    return request.SerializeToString()


@pytest.mark.parametrize(
    "message", [_with_parameters(), _with_input_parameter(), _with_output_parameter(), _typed_contents()]
)
def test_headers_with_parameters_or_typed_contents_are_not_kept(message: bytes) -> None:
    plans = RequestPlans()
    request = plans.decode(split_infer_request(message))
    assert _fields(request) == _fields(decode_request(split_infer_request(message)))
    assert len(plans) == 0


def test_bad_headers_fail_as_a_fresh_decode_and_are_not_kept() -> None:
    plans = RequestPlans()
    twice = pb.ModelInferRequest.FromString(_message([1, 2], 3))
    twice.inputs[1].name = "A"
    for message in (b"\x0a\x05ab", twice.SerializeToString()):
        for _ in range(2):
            with pytest.raises(InvalidArgument) as kept:
                plans.decode(split_infer_request(message))
            with pytest.raises(InvalidArgument) as fresh:
                decode_request(split_infer_request(message))
            assert kept.value.message == fresh.value.message
    assert len(plans) == 0


def test_at_most_limit_headers_are_kept() -> None:
    plans = RequestPlans(limit=3)
    for i in range(7):
        plans.decode(split_infer_request(_message([1, 2], 3, rid=f"r{i}")))
        assert 1 <= len(plans) <= 3
