"""TensorRT datatypes <-> inference-protocol datatypes, keyed by the enum member's name.

Keys are ``tensorrt.DataType`` member names (``DataType.FLOAT.name == "FLOAT"``), so this table
is usable and testable without TensorRT installed.
"""

from __future__ import annotations

from typing import Any

#: ``tensorrt.DataType`` name -> wire datatype. FP8, INT4, FP4 and E8M0 have no protocol type.
TRT_TO_WIRE: dict[str, str] = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "UINT8": "UINT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
}

WIRE_TO_TRT: dict[str, str] = {wire: trt for trt, wire in TRT_TO_WIRE.items()}


def trt_name(dtype: Any) -> str:
    """``DataType.FLOAT`` -> ``"FLOAT"`` (also accepts the name itself)."""
    if isinstance(dtype, str):
        return dtype.rpartition(".")[2]
    name = getattr(dtype, "name", None)
    return str(name) if name is not None else str(dtype).rpartition(".")[2]


def wire_from_trt(dtype: Any) -> str | None:
    """The wire datatype of a TensorRT datatype, or None where the protocol has none."""
    return TRT_TO_WIRE.get(trt_name(dtype))


def config_type(wire: str) -> str:
    """``FP32`` -> ``TYPE_FP32`` (TensorRT has no string type)."""
    return "TYPE_" + wire
