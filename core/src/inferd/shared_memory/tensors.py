"""Tensors in shared memory, for frontends: inputs read from regions, outputs written to them.

A frontend calls :func:`read_input` for an input whose parameters name a region,
:func:`bind_outputs` once the request is decoded (before it runs) and :meth:`OutputSinks.write`
on the response; nothing below the frontends knows about shared memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse
from inferd.datatypes import array_from_bytes, array_to_bytes, element_size
from inferd.shared_memory.registry import Regions, Sink

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
KEYS = (REGION, OFFSET, BYTE_SIZE)


def region_of(params: Mapping[str, Any]) -> tuple[str, int, int]:
    """The region name, offset and byte size a tensor's parameters ask for."""
    name = params[REGION]
    if not isinstance(name, str):
        raise InvalidArgument(f"Unable to parse '{REGION}': expected a string, got {type(name).__name__}")
    return name, _size(params, OFFSET), _size(params, BYTE_SIZE)


def _size(params: Mapping[str, Any], key: str) -> int:
    value = params.get(key, 0)
    if type(value) is not int or value < 0:
        raise InvalidArgument(f"Unable to parse '{key}': expected an unsigned integer, got {value!r}")
    return value


def without_region(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters but the shared-memory ones (what the backend sees)."""
    return {k: v for k, v in params.items() if k not in KEYS}


def only_one_source(has_data: bool, has_binary: bool) -> None:
    """Triton's error for an HTTP input in a region that also has JSON or binary data."""
    if has_data or has_binary:
        named = " ".join(f"'{n}'" for n, on in (("data", has_data), ("binary_data_size", has_binary)) if on)
        raise InvalidArgument(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            f"'shared_memory_region' in 'parameters'. But set {named} 'shared_memory_region'"
        )


def read_input(
    regions: Regions | None, model: str, name: str, datatype: str, shape: tuple[int, ...], params: Mapping[str, Any]
) -> np.ndarray:
    """Input ``name`` as a numpy array over its region's bytes (system memory: no copy)."""
    if regions is None:
        raise InvalidArgument(f"input '{name}': shared memory is not available on this path")
    region_name, offset, byte_size = region_of(params)
    region = regions.checked(region_name, offset, byte_size)
    itemsize = element_size(datatype)
    if itemsize:
        expected = itemsize
        for d in shape:
            expected *= d
        if byte_size != expected:
            raise InvalidArgument(
                f"input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, got {byte_size}"
            )
    try:
        return array_from_bytes(region.input(offset, byte_size), datatype, shape)
    except InvalidArgument as exc:
        raise InvalidArgument(f"input '{name}' in shared memory region '{region_name}': {exc.message}") from None


class OutputSinks:
    """Where the outputs a request asked for in shared memory go, resolved before it runs."""

    __slots__ = ("sinks",)

    def __init__(self, sinks: dict[str, tuple[Sink, int]]) -> None:
        #: Output name -> (sink, the bytes the client set aside).
        self.sinks = sinks

    def __contains__(self, name: object) -> bool:
        return name in self.sinks

    def write(self, response: InferResponse) -> None:
        """Copy each such output of ``response`` into its region (one copy each)."""
        for tensor in response.outputs:
            entry = self.sinks.get(tensor.name)
            if entry is None:
                continue
            sink, room = entry
            data = array_to_bytes(tensor.data, tensor.datatype)
            if len(data) > room:
                raise InferdError(
                    f"shared memory size specified with the request for output '{tensor.name}' ({room} bytes) "
                    f"should be at least {len(data)} bytes to hold the results",
                    ErrorKind.INTERNAL,
                )
            sink.write(data)


def bind_outputs(request: InferRequest, regions: Regions) -> OutputSinks | None:
    """The sinks of the outputs ``request`` asks for in shared memory; ``None`` when it asks for
    none (the common case costs one look at each requested output's parameters)."""
    sinks: dict[str, tuple[Sink, int]] | None = None
    for out in request.outputs:
        params = out.parameters
        if params and REGION in params:
            if params.get("binary_data") is True:
                raise InvalidArgument("Output can't set both 'shared_memory_region' and 'binary_data'")
            region_name, offset, byte_size = region_of(params)
            region = regions.checked(region_name, offset, byte_size)
            if sinks is None:
                sinks = {}
            sinks[out.name] = (region.output(offset, byte_size), byte_size)
    return None if sinks is None else OutputSinks(sinks)
