"""Input tensors for the requests: random, zero, or perf_analyzer's JSON input-data file.

Data is built once, before measuring (as perf_analyzer does); requests cycle through it. The
result is a list of *streams*, each a list of *entries* ``{input name: array with batch dim}``:
one stream for ordinary models, one per data stream of a sequence model's JSON file.
"""

from __future__ import annotations

import base64
import json
import string
from pathlib import Path
from typing import Any

import numpy as np

from inferd.tools import ToolError
from inferd.tools.perf.model import ModelInfo, TensorSpec
from inferd.tools.perf.options import PerfOptions

Entry = dict[str, np.ndarray]

NP_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
    "BF16": np.uint16,
}  # BF16 travels as its raw 2-byte words


def input_dims(info: ModelInfo, spec: TensorSpec, opts: PerfOptions) -> list[int]:
    """The shape of one batch row of ``spec``: ``--shape`` where given, else the model's dims."""
    dims = list(spec.shape[1:] if info.max_batch_size > 0 else spec.shape)
    if spec.name in opts.shapes:
        return list(opts.shapes[spec.name])
    if any(d < 0 for d in dims):
        raise ToolError(
            f"model '{info.name}' input '{spec.name}' has variable dims {dims}; "
            f"give its shape with --shape {spec.name}:{','.join('1' if d < 0 else str(d) for d in dims)}"
        )
    return dims


def check_batch(info: ModelInfo, opts: PerfOptions) -> None:
    """``-b`` must fit the model's ``max_batch_size``."""
    mbs = info.max_batch_size
    if mbs == 0 and opts.batch_size > 1:
        raise ToolError(f"model '{info.name}' does not support batching (max_batch_size 0); -b must be 1")
    if mbs > 0 and opts.batch_size > mbs:
        raise ToolError(f"-b {opts.batch_size} is larger than model '{info.name}' max_batch_size {mbs}")


def _synthetic(
    spec: TensorSpec, dims: list[int], opts: PerfOptions, rng: np.random.Generator, zero: bool
) -> np.ndarray:
    dtype = NP_DTYPES.get(spec.datatype)
    if dtype is None:
        raise ToolError(f"input '{spec.name}' has datatype {spec.datatype}, which inferd perf cannot generate")
    count = int(np.prod(dims)) if dims else 1
    if spec.datatype == "BYTES":
        if opts.string_data is not None:
            values = [opts.string_data.encode()] * count
        elif zero:
            values = [b"0"] * count
        else:
            letters = np.frombuffer((string.ascii_letters + string.digits).encode(), np.uint8)
            raw = rng.choice(letters, size=(count, opts.string_length)).astype(np.uint8)
            values = [row.tobytes() for row in raw]
        return np.array(values, dtype=np.object_).reshape(dims)
    if zero:
        return np.zeros(dims, dtype)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if spec.datatype in ("FP16", "FP32", "FP64"):
        return rng.random(size=dims).astype(dtype)
    if spec.datatype == "BF16":
        return (rng.random(size=dims).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return rng.integers(0, 100, size=dims).astype(dtype)


def _batched(info: ModelInfo, row: np.ndarray, opts: PerfOptions) -> np.ndarray:
    """Add the batch dim (``-b`` copies of the row) for a batching model."""
    if info.max_batch_size == 0:
        return row
    return np.ascontiguousarray(np.broadcast_to(row, (opts.batch_size, *row.shape)))


def build_data(info: ModelInfo, opts: PerfOptions) -> list[list[Entry]]:
    """The streams of entries the requests cycle through."""
    check_batch(info, opts)
    if not info.inputs:
        raise ToolError(f"model '{info.name}' has no inputs in its metadata")
    if opts.input_data in ("random", "zero"):
        rng = np.random.default_rng(0)
        zero = opts.input_data == "zero"
        entry = {
            s.name: _batched(info, _synthetic(s, input_dims(info, s, opts), opts, rng, zero), opts) for s in info.inputs
        }
        return [[entry]]
    return _from_json(info, opts, Path(opts.input_data))


def _from_json(info: ModelInfo, opts: PerfOptions, path: Path) -> list[list[Entry]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ToolError(f"--input-data {path}: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not data:
        raise ToolError(f'--input-data {path}: expected {{"data": [{{"INPUT": [...]}}, ...]}}')
    streams = [s if isinstance(s, list) else [s] for s in data] if isinstance(data[0], list) else [data]
    if not info.is_sequence:
        streams = [[e for s in streams for e in s]]
    specs = {s.name: s for s in info.inputs}
    out = []
    for si, stream in enumerate(streams):
        entries = []
        for ei, raw in enumerate(stream):
            where = f"--input-data {path}: data[{si}][{ei}]" if len(streams) > 1 else f"--input-data {path}: data[{ei}]"
            entries.append(_entry(info, opts, specs, raw, where))
        out.append(entries)
    return out


def _entry(info: ModelInfo, opts: PerfOptions, specs: dict[str, TensorSpec], raw: Any, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise ToolError(f"{where}: expected an object mapping input names to data")
    missing = [n for n in specs if n not in raw]
    if missing:
        raise ToolError(f"{where}: no data for input '{missing[0]}' of model '{info.name}'")
    entry = {}
    for name, spec in specs.items():
        row = _tensor(spec, raw[name], info, opts, f"{where} input '{name}'")
        entry[name] = _batched(info, row, opts)
    return entry


def _tensor(spec: TensorSpec, value: Any, info: ModelInfo, opts: PerfOptions, where: str) -> np.ndarray:
    shape = None
    if isinstance(value, dict) and "content" in value:
        shape = value.get("shape")
        value = value["content"]
    if shape is None:
        shape = input_dims(info, spec, opts)
    dtype = NP_DTYPES.get(spec.datatype)
    if dtype is None:
        raise ToolError(f"{where}: unsupported datatype {spec.datatype}")
    try:
        if isinstance(value, dict) and "b64" in value:
            raw = base64.b64decode(value["b64"])
            if spec.datatype == "BYTES":
                return _deserialize_bytes(raw, where).reshape(shape)
            return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)
        flat = np.asarray(value, dtype=object).reshape(-1)
        if spec.datatype == "BYTES":
            return np.array([v.encode() if isinstance(v, str) else bytes(v) for v in flat], dtype=np.object_).reshape(
                shape
            )
        return np.asarray(flat.tolist(), dtype=dtype).reshape(shape)
    except (ValueError, TypeError) as exc:
        raise ToolError(f"{where}: cannot make a {spec.datatype} tensor of shape {list(shape)}: {exc}") from None


def _deserialize_bytes(raw: bytes, where: str) -> np.ndarray:
    """Triton's BYTES serialization (4-byte little-endian length before each element)."""
    out, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ToolError(f"{where}: truncated BYTES element length")
        n = int.from_bytes(raw[offset : offset + 4], "little")
        out.append(raw[offset + 4 : offset + 4 + n])
        offset += 4 + n
    return np.array(out, dtype=np.object_)


def serialize_bytes(array: np.ndarray) -> bytes:
    """The binary wire form of a BYTES tensor."""
    parts = []
    for item in array.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(b).to_bytes(4, "little"))
        parts.append(b)
    return b"".join(parts)


def raw_bytes(array: np.ndarray, datatype: str) -> bytes:
    """The binary wire form of any tensor (little-endian, row-major)."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
