"""Inputs the sequence batcher adds to each request: control tensors and implicit state.

Control tensors follow Triton: ``CONTROL_SEQUENCE_START`` / ``_END`` / ``_READY`` carry the
configured false/true value, ``CONTROL_SEQUENCE_CORRID`` the correlation id in its configured
type; each has shape ``[1]``, or ``[1, 1]`` when the model batches. Implicit state
(``sequence_batching.state``) feeds the output ``output_name`` of one request of a sequence as
the input ``input_name`` of the next.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.contracts.errors import ConfigError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.datatypes import config_to_wire, deserialize_bytes_tensor, numpy_dtype

if TYPE_CHECKING:
    from inferd.config import ModelConfig

_START, _READY, _END, _CORRID = 0, 1, 2, 3
_UINT64_MASK = (1 << 64) - 1


def _wire_type(message: Any, field: str = "data_type") -> str:
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    return config_to_wire(enum.values_by_number[getattr(message, field)].name)


@dataclass(frozen=True, slots=True)
class _Flag:
    """A START, END or READY control tensor: its name, type and false/true values."""

    name: str
    datatype: str
    dtype: np.dtype
    false: Any
    true: Any

    def tensor(self, value: bool, shape: tuple[int, ...]) -> InferTensor:
        return InferTensor(
            self.name, self.datatype, shape, np.full(shape, self.true if value else self.false, self.dtype)
        )


def _flag(name: str, control: Any) -> _Flag:
    if len(control.int32_false_true):
        return _Flag(name, "INT32", np.dtype(np.int32), *control.int32_false_true)
    if len(control.fp32_false_true):
        return _Flag(name, "FP32", np.dtype(np.float32), *control.fp32_false_true)
    return _Flag(name, "BOOL", np.dtype(np.bool_), *control.bool_false_true)


class SequenceControls:
    """The control tensors a model asked for in ``sequence_batching.control_input``."""

    def __init__(self, config: ModelConfig) -> None:
        self.shape: tuple[int, ...] = (1, 1) if config.max_batch_size > 0 else (1,)
        self.start: _Flag | None = None
        self.end: _Flag | None = None
        self.ready: _Flag | None = None
        self.corrid_name = ""
        self.corrid_type = ""
        for control_input in config.sequence_batching.control_input:
            for control in control_input.control:
                if control.kind == _START:
                    self.start = _flag(control_input.name, control)
                elif control.kind == _END:
                    self.end = _flag(control_input.name, control)
                elif control.kind == _READY:
                    self.ready = _flag(control_input.name, control)
                elif control.kind == _CORRID:
                    self.corrid_name = control_input.name
                    self.corrid_type = _wire_type(control)

    def corrid(self, cid: int | str) -> InferTensor | None:
        """The CORRID tensor for a sequence (made once per sequence), or None if not asked for."""
        if not self.corrid_name:
            return None
        wire = self.corrid_type
        if wire == "BYTES":
            array = np.empty(self.shape, dtype=np.object_)
            array.reshape(-1)[0] = cid.encode() if isinstance(cid, str) else str(cid).encode()
        else:
            # A string id with a numeric CORRID: Triton passes undefined bytes; inferd passes a
            # stable 64-bit hash of the string so the model still sees one value per sequence.
            if isinstance(cid, str):
                value = int.from_bytes(hashlib.blake2b(cid.encode(), digest_size=8).digest(), "little")
            else:
                value = cid & _UINT64_MASK
            wide = np.array([value], dtype=np.uint64)
            if wire in ("INT32", "UINT32"):
                wide = (wide & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            array = wide.view(numpy_dtype(wire)).reshape(self.shape)
        return InferTensor(self.corrid_name, wire, self.shape, array)

    def add(self, inputs: dict[str, InferTensor], start: bool, end: bool, corrid: InferTensor | None) -> None:
        """Add the control tensors of one (ready) request to its inputs."""
        shape = self.shape
        if self.start is not None:
            inputs[self.start.name] = self.start.tensor(start, shape)
        if self.end is not None:
            inputs[self.end.name] = self.end.tensor(end, shape)
        if self.ready is not None:
            inputs[self.ready.name] = self.ready.tensor(True, shape)
        if corrid is not None:
            inputs[corrid.name] = InferTensor(corrid.name, corrid.datatype, corrid.shape, corrid.data.copy())


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One ``sequence_batching.state`` entry with its initial value (batch dim included)."""

    input_name: str
    output_name: str
    datatype: str
    dtype: np.dtype
    initial: np.ndarray
    returned: bool  # the output is listed in the config, so a client may ask for it


class ImplicitState:
    """The implicit state entries of a model; per-sequence values live in the sequence."""

    def __init__(self, config: ModelConfig, model_dir: Path | None) -> None:
        outputs = {t.name for t in config.output}
        batched = config.max_batch_size > 0
        self.specs = [
            _state_spec(config.name, s, batched, model_dir, s.output_name in outputs)
            for s in config.sequence_batching.state
        ]
        self.output_names = frozenset(s.output_name for s in self.specs)
        self.hidden = frozenset(s.output_name for s in self.specs if not s.returned)

    def __bool__(self) -> bool:
        return bool(self.specs)

    def initial(self) -> dict[str, np.ndarray]:
        return {s.input_name: s.initial.copy() for s in self.specs}

    def initial_key(self) -> tuple[tuple[int, ...], ...]:
        return tuple(s.initial.shape for s in self.specs)

    def capture(self, response: InferResponse, values: dict[str, np.ndarray], strip: frozenset[str]) -> None:
        """Keep the state outputs of ``response`` for the next request; drop the hidden ones."""
        for spec in self.specs:
            out = response.output(spec.output_name)
            if out is not None:
                data = out.data
                values[spec.input_name] = data if data.dtype == spec.dtype else data.astype(spec.dtype)
        if strip:
            response.outputs = [o for o in response.outputs if o.name not in strip]


def _state_spec(model: str, state: Any, batched: bool, model_dir: Path | None, returned: bool) -> StateSpec:
    wire = _wire_type(state)
    dtype = numpy_dtype(wire)
    where = f"model '{model}': sequence_batching state '{state.input_name}'"
    if not state.input_name or not state.output_name:
        raise ConfigError(f"{where}: a state needs both 'input_name' and 'output_name'")
    if len(state.initial_state) > 1:
        raise ConfigError(
            f"{where}: initial_state field for state input '{state.input_name}' must contain exactly one "
            f"or zero element. Found '{len(state.initial_state)}' elements."
        )
    batch = (1,) if batched else ()
    if not state.initial_state:
        shape = batch + tuple(1 if d == -1 else int(d) for d in state.dims)
        initial = np.zeros(shape, dtype=dtype) if wire != "BYTES" else np.full(shape, b"", dtype=np.object_)
        return StateSpec(state.input_name, state.output_name, wire, dtype, initial, returned)
    init = state.initial_state[0]
    _check_initial(where, state, init, wire)
    shape = batch + tuple(int(d) for d in init.dims)
    if init.WhichOneof("state_data") == "data_file":
        initial = _read_initial(where, model_dir, init.data_file, wire, dtype, shape)
    else:
        initial = np.zeros(shape, dtype=dtype) if wire != "BYTES" else np.full(shape, b"", dtype=np.object_)
    return StateSpec(state.input_name, state.output_name, wire, dtype, initial, returned)


def _check_initial(where: str, state: Any, init: Any, wire: str) -> None:
    if _wire_type(init) != wire:
        raise ConfigError(
            f"{where}: the data type used for 'initial_state' field of state '{state.input_name}' "
            "does not match the state data type."
        )
    if not init.name:
        raise ConfigError(f"{where}: field 'name' must be set when using initial_state")
    if len(init.dims) != len(state.dims):
        raise ConfigError(
            f"{where}: number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions. {len(init.dims)} != {len(state.dims)}"
        )
    for got, want in zip(init.dims, state.dims, strict=True):
        if got == -1:
            raise ConfigError(f"{where}: 'initial_state' contains variable dimensions")
        if want != -1 and got != want:
            raise ConfigError(f"{where}: 'initial_state' dim doesn't match 'state' dim description. {got} != {want}")
    if init.WhichOneof("state_data") is None:
        raise ConfigError(f"{where}: initial_state must set 'zero_data' or 'data_file'")


def _read_initial(
    where: str, model_dir: Path | None, name: str, wire: str, dtype: np.dtype, shape: tuple[int, ...]
) -> np.ndarray:
    if model_dir is None:
        raise ConfigError(f"{where}: initial_state data_file '{name}' needs the model directory, which is unknown")
    path = model_dir / "initial_state" / name
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read initial_state data_file '{path}': {exc.strerror}") from None
    count = int(np.prod(shape, dtype=np.int64))
    if wire == "BYTES":
        return deserialize_bytes_tensor(raw, count).reshape(shape)
    need = count * dtype.itemsize
    if len(raw) < need:
        raise ConfigError(f"{where}: initial_state expects {need} bytes, but '{path}' only has {len(raw)} bytes")
    return np.frombuffer(raw[:need], dtype=dtype).reshape(shape).copy()


def sequence_parameters(
    request: InferRequest, model: str, iterative: bool = False
) -> tuple[int | str | None, bool, bool]:
    """``(correlation id, start, end)`` from the request parameters, checked as Triton does.

    ``iterative``: a request without a correlation id is accepted (the id is None).
    """
    params = request.parameters
    cid = params.get("sequence_id", 0)
    if isinstance(cid, bool) or not isinstance(cid, (int, str)) or (isinstance(cid, int) and not 0 <= cid < 1 << 64):
        raise InvalidArgument(
            f"request parameter 'sequence_id' for model '{model}' must be an unsigned 64-bit integer or a "
            f"string, got {cid!r}"
        )
    if cid == 0 or cid == "":
        if iterative:
            cid = None
        else:
            raise InvalidArgument(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )
    flags = []
    for key in ("sequence_start", "sequence_end"):
        value = params.get(key, False)
        if not isinstance(value, bool):
            raise InvalidArgument(f"request parameter '{key}' for model '{model}' must be a boolean, got {value!r}")
        flags.append(value)
    return cid, flags[0], flags[1]
