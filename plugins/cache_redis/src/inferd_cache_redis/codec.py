"""A compact binary form of a cached response: a small JSON header, then raw tensor bytes.

    b"IFRC" | format (u8) | header length (u32 LE) | header (UTF-8 JSON) | tensor bytes...

The header names the model, version, response parameters and each output's name, datatype,
shape, byte count and parameters. Tensor bytes are little-endian as on the wire (BYTES: each
element a 4-byte length and its bytes). Decoding makes numpy views over the stored bytes, so
the arrays are read-only and nothing is copied twice. No pickle: an entry someone else wrote
into Redis cannot run code here.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from inferd.api import InferResponse, InferTensor, array_from_bytes, array_to_bytes

MAGIC = b"IFRC"
FORMAT = 1
_PREFIX = struct.Struct("<4sBI")


def encode(response: InferResponse) -> bytes:
    """The stored form of ``response`` (its id is not stored: a hit answers under its own)."""
    chunks: list[bytes | memoryview] = []
    outputs = []
    for t in response.outputs:
        raw = array_to_bytes(t.data, t.datatype)
        chunks.append(raw)
        entry = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape), "nbytes": len(raw)}
        if t.parameters:
            entry["parameters"] = t.parameters
        outputs.append(entry)
    header: dict[str, Any] = {"model": response.model_name, "version": response.model_version, "outputs": outputs}
    if response.parameters:
        header["parameters"] = response.parameters
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_PREFIX.pack(MAGIC, FORMAT, len(head)), head, *chunks])


def decode(data: bytes) -> InferResponse:
    """The response stored in ``data``; raises ValueError for anything this format did not write."""
    if len(data) < _PREFIX.size:
        raise ValueError(f"cache entry of {len(data)} bytes is too short")
    magic, fmt, head_len = _PREFIX.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT:
        raise ValueError(f"cache entry is not an inferd response (magic {magic!r}, format {fmt})")
    view = memoryview(data)
    offset = _PREFIX.size + head_len
    header = json.loads(bytes(view[_PREFIX.size : offset]))
    outputs = []
    for o in header["outputs"]:
        end = offset + o["nbytes"]
        if end > len(data):
            raise ValueError(f"cache entry is truncated in output '{o['name']}'")
        array = array_from_bytes(view[offset:end], o["datatype"], tuple(o["shape"]))
        array.flags.writeable = False
        outputs.append(InferTensor(o["name"], o["datatype"], tuple(o["shape"]), array, o.get("parameters", {})))
        offset = end
    return InferResponse(header["model"], header["version"], "", outputs, header.get("parameters", {}))
