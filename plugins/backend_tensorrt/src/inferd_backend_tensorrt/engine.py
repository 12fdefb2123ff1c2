"""What a TensorRT engine declares (I/O tensors, optimization profiles), as plain data.

:func:`describe` reads an engine through TensorRT 10's name-based API (``num_io_tensors``,
``get_tensor_name``, ``get_tensor_mode``, ``get_tensor_dtype``, ``get_tensor_shape``,
``get_tensor_profile_shape``); everything else here works on the resulting :class:`EngineInfo`, so
profile choice and batch limits are testable without TensorRT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferd.api import InvalidArgument
from inferd_backend_tensorrt.dtypes import trt_name, wire_from_trt

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ProfileRange:
    """One input's shapes in one optimization profile."""

    min: Shape
    opt: Shape
    max: Shape

    def accepts(self, shape: Shape) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= s <= hi for lo, s, hi in zip(self.min, shape, self.max, strict=True)
        )


@dataclass(frozen=True)
class EngineTensor:
    """One I/O tensor of an engine. ``shape`` has -1 where the engine accepts any size."""

    name: str
    is_input: bool
    trt_dtype: str
    datatype: str | None  # wire datatype; None when the protocol has none (FP8, INT4...)
    shape: Shape
    is_shape_tensor: bool = False
    #: Inputs only: the range of each optimization profile, by profile index.
    profiles: tuple[ProfileRange, ...] = ()

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.shape)


@dataclass(frozen=True)
class EngineInfo:
    """Every I/O tensor of an engine and its number of optimization profiles."""

    tensors: tuple[EngineTensor, ...]
    num_profiles: int

    @property
    def inputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if t.is_input]

    @property
    def outputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if not t.is_input]

    def get(self, name: str) -> EngineTensor | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    @property
    def dynamic(self) -> bool:
        """True when any tensor has a dynamic dimension (engines are then not shared)."""
        return any(t.dynamic for t in self.tensors)

    def can_batch(self) -> bool:
        """Every data tensor has a dynamic first dimension: the engine takes a batch dimension."""
        data = [t for t in self.tensors if not t.is_shape_tensor]
        return bool(self.inputs) and all(t.shape and t.shape[0] == -1 for t in data)

    def max_batch_size(self, profiles: Sequence[int]) -> int:
        """Triton's rule: the largest, over ``profiles``, of the smallest input max batch (0 when the
        engine cannot batch)."""
        if not self.can_batch():
            return 0
        best = 0
        for p in profiles:
            limits = [t.profiles[p].max[0] for t in self.inputs if not t.is_shape_tensor and len(t.profiles) > p]
            if limits:
                best = max(best, min(limits))
        return best


def describe(engine: Any) -> EngineInfo:
    """Read an ``ICudaEngine`` (TensorRT 10 API) into an :class:`EngineInfo`."""
    num_profiles = max(1, int(engine.num_optimization_profiles))
    tensors = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = trt_name(engine.get_tensor_mode(name)) == "INPUT"
        dtype = engine.get_tensor_dtype(name)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        is_shape = bool(is_input and engine.is_shape_inference_io(name))
        profiles: tuple[ProfileRange, ...] = ()
        if is_input and not is_shape:
            ranges = []
            for p in range(num_profiles):
                lo, opt, hi = engine.get_tensor_profile_shape(name, p)
                ranges.append(ProfileRange(_shape(lo), _shape(opt), _shape(hi)))
            profiles = tuple(ranges)
        tensors.append(EngineTensor(name, is_input, trt_name(dtype), wire_from_trt(dtype), shape, is_shape, profiles))
    return EngineInfo(tuple(tensors), num_profiles)


def _shape(dims: Any) -> Shape:
    return tuple(int(d) for d in dims)


def profile_indices(groups: Sequence[Any], num_profiles: int, model: str) -> list[int]:
    """The profiles named by ``instance_group.profile`` (Triton: profile 0 when none is named)."""
    out: set[int] = set()
    for group in groups:
        out.update(parse_profiles(group.profile, num_profiles, model))
    return sorted(out) or [0]


def parse_profiles(names: Sequence[str], num_profiles: int, model: str) -> list[int]:
    """``["0", "2"]`` -> ``[0, 2]``; raises InvalidArgument for names outside the engine's profiles."""
    out = []
    for name in names:
        try:
            index = int(name)
        except ValueError:
            raise InvalidArgument(f"model '{model}': instance_group profile '{name}' is not a number") from None
        if not 0 <= index < num_profiles:
            raise InvalidArgument(
                f"model '{model}': instance_group names optimization profile {index}, but the engine has "
                f"{num_profiles} (0..{num_profiles - 1})"
            )
        out.append(index)
    return out or [0]


def choose_profile(info: EngineInfo, profiles: Sequence[int], shapes: Mapping[str, Shape], model: str) -> int:
    """The profile, among ``profiles``, that accepts every input shape and is closest to its
    ``opt`` shapes; raises InvalidArgument naming the shapes and the ranges when none does."""
    best, best_cost = -1, -1
    for p in profiles:
        cost = 0
        for t in info.inputs:
            if t.is_shape_tensor or t.name not in shapes:
                continue
            rng = t.profiles[p]
            if not rng.accepts(shapes[t.name]):
                break
            cost += sum(abs(o - s) for o, s in zip(rng.opt, shapes[t.name], strict=True))
        else:
            if best < 0 or cost < best_cost:
                best, best_cost = p, cost
    if best >= 0:
        return best
    ranges = "; ".join(
        f"profile {p}: "
        + ", ".join(
            f"{t.name} {list(t.profiles[p].min)}..{list(t.profiles[p].max)}"
            for t in info.inputs
            if not t.is_shape_tensor
        )
        for p in profiles
    )
    got = ", ".join(f"{n} {list(s)}" for n, s in shapes.items())
    raise InvalidArgument(
        f"model '{model}': no optimization profile of this instance accepts the input shapes {got} ({ranges})"
    )
