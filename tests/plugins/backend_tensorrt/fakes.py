"""A stand-in for a TensorRT ``ICudaEngine`` (the TensorRT 10 methods the backend reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Member:
    """Mimics a member of a TensorRT enum (``DataType.FLOAT``, ``TensorIOMode.INPUT``)."""

    name: str


@dataclass
class FakeTensor:
    name: str
    mode: str  # "INPUT" or "OUTPUT"
    dtype: str  # TensorRT DataType name
    shape: tuple[int, ...]
    profiles: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    shape_tensor: bool = False


class FakeEngine:
    def __init__(self, tensors: list[FakeTensor], num_profiles: int = 1) -> None:
        self.tensors = {t.name: t for t in tensors}
        self.order = [t.name for t in tensors]
        self.num_io_tensors = len(tensors)
        self.num_optimization_profiles = num_profiles

    def get_tensor_name(self, i: int) -> str:
        return self.order[i]

    def get_tensor_mode(self, name: str) -> Any:
        return Member(self.tensors[name].mode)

    def get_tensor_dtype(self, name: str) -> Any:
        return Member(self.tensors[name].dtype)

    def get_tensor_shape(self, name: str) -> list[int]:
        return list(self.tensors[name].shape)

    def is_shape_inference_io(self, name: str) -> bool:
        return self.tensors[name].shape_tensor

    def get_tensor_profile_shape(self, name: str, profile: int) -> list[tuple[int, ...]]:
        return list(self.tensors[name].profiles[profile])


def batch_engine() -> FakeEngine:
    """INPUT0 FP32 [-1,4] and INPUT1 INT32 [-1] -> OUTPUT0 FP32 [-1,4], OUTPUT1 INT64 [-1];
    profile 0 takes batches 1..8, profile 1 takes 4..16."""
    profiles0 = [((1, 4), (4, 4), (8, 4)), ((4, 4), (8, 4), (16, 4))]
    profiles1 = [((1,), (4,), (8,)), ((4,), (8,), (16,))]
    return FakeEngine(
        [
            FakeTensor("INPUT0", "INPUT", "FLOAT", (-1, 4), profiles0),
            FakeTensor("INPUT1", "INPUT", "INT32", (-1,), profiles1),
            FakeTensor("OUTPUT0", "OUTPUT", "FLOAT", (-1, 4)),
            FakeTensor("OUTPUT1", "OUTPUT", "INT64", (-1,)),
        ],
        num_profiles=2,
    )


def static_engine() -> FakeEngine:
    """X FP16 [2,3] -> Y FP16 [2,3], one profile."""
    return FakeEngine(
        [
            FakeTensor("X", "INPUT", "HALF", (2, 3), [((2, 3), (2, 3), (2, 3))]),
            FakeTensor("Y", "OUTPUT", "HALF", (2, 3)),
        ]
    )
