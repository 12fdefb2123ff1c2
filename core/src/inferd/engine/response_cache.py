"""Response caching for one model version: request keys, lookup/insert, and statistics.

Triton's semantics (docs/user_guide/response_cache.md): a model uses the cache when the server
has one (``--cache-config``) and its config says ``response_cache { enable: true }``; the key
covers the model name, version and every input; only successful responses are stored; a hit
skips the model. On a hit the model's statistics count a success and a cache hit (no inference
or execution); on a miss, a cache miss whose time is the lookup plus the insert.

inferd's key is stricter than Triton's 64-bit boost hash: a 128-bit BLAKE2b over the model
name and version, each input's name, datatype, shape and raw bytes, the requested outputs (and
their parameters other than ``binary_data``) and the request parameters that can change what a
model computes. Triton leaves the last two out, so a request asking for one output could be
answered with another request's output set; here they are separate entries.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.datatypes import serialize_bytes_tensor

if TYPE_CHECKING:
    from inferd.contracts.cache import ResponseCache
    from inferd.engine.stats import ModelStats

log = logging.getLogger(__name__)

#: Request parameters that only steer transport or scheduling, never the outputs.
IGNORED_PARAMETERS = frozenset(
    {
        "binary_data_output",
        "priority",
        "timeout",
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "triton_enable_empty_final_response",
    }
)
#: Per-output parameters that only steer encoding.
IGNORED_OUTPUT_PARAMETERS = frozenset(
    {"binary_data", "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"}
)

_KEY_VERSION = b"inferd-response-cache-1"
_LEN = struct.Struct("<Q").pack
_ERROR_LOG_INTERVAL_S = 10.0
#: Inputs larger than this are hashed on a worker thread (hashlib releases the GIL), not the loop.
HASH_OFF_LOOP_BYTES = 256 * 1024


def _put(h: Any, data: bytes) -> None:
    """Length-prefixed update, so that field boundaries cannot be confused."""
    h.update(_LEN(len(data)))
    h.update(data)


def _put_params(h: Any, params: dict[str, Any], ignored: frozenset[str]) -> None:
    items = sorted((k, v) for k, v in params.items() if k not in ignored)
    h.update(_LEN(len(items)))
    for k, v in items:
        _put(h, k.encode())
        _put(h, f"{type(v).__name__}:{v!r}".encode())


def _put_array(h: Any, array: np.ndarray, datatype: str) -> None:
    if datatype == "BYTES":
        _put(h, serialize_bytes_tensor(array))
        return
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)  # no copy when contiguous
    h.update(_LEN(flat.nbytes))
    h.update(flat)


def request_key(model_name: str, version: int | str, request: InferRequest) -> bytes:
    """The cache key of ``request`` for ``model_name``/``version`` (16 bytes)."""
    h = hashlib.blake2b(_KEY_VERSION, digest_size=16)
    _put(h, model_name.encode())
    _put(h, str(version).encode())
    h.update(_LEN(len(request.inputs)))
    for name in sorted(request.inputs):
        tensor = request.inputs[name]
        _put(h, name.encode())
        _put(h, tensor.datatype.encode())
        _put(h, struct.pack(f"<{len(tensor.shape)}q", *tensor.shape))
        _put_array(h, tensor.data, tensor.datatype)
    outputs = sorted(request.outputs, key=lambda o: o.name)
    h.update(_LEN(len(outputs)))
    for out in outputs:
        _put(h, out.name.encode())
        _put_params(h, out.parameters, IGNORED_OUTPUT_PARAMETERS)
    _put_params(h, request.parameters, IGNORED_PARAMETERS)
    return h.digest()


def answer_from(cached: InferResponse, request: InferRequest) -> InferResponse:
    """The response a hit returns: the cached outputs (shared, read-only) under this request's id."""
    outputs = [replace(t, parameters=dict(t.parameters)) for t in cached.outputs]
    return InferResponse(cached.model_name, cached.model_version, request.id, outputs, dict(cached.parameters))


class ModelCache:
    """One model version's use of the server's response cache."""

    def __init__(self, cache: ResponseCache, model_name: str, version: int, stats: ModelStats) -> None:
        self.cache = cache
        self.model_name = model_name
        self.version = version
        self.stats = stats
        self.blocking = bool(getattr(cache, "blocking", True))
        self._last_error_log = 0.0

    async def infer(
        self, request: InferRequest, run: Callable[[InferRequest], Awaitable[InferResponse]]
    ) -> InferResponse:
        """Answer ``request`` from the cache, or through ``run`` and then store the result."""
        start = time.monotonic_ns()
        if sum(t.data.nbytes for t in request.inputs.values()) > HASH_OFF_LOOP_BYTES:
            key = await asyncio.to_thread(request_key, self.model_name, self.version, request)
        else:
            key = request_key(self.model_name, self.version, request)
        cached = await self._call("lookup", self.cache.lookup, key)
        if cached is not None:
            end = time.monotonic_ns()
            self.stats.record_cache(True, end - start, end - request.arrival_ns, start - request.arrival_ns)
            return answer_from(cached, request)
        lookup_ns = time.monotonic_ns() - start
        response = await run(request)  # errors propagate; failures are never cached
        insert_start = time.monotonic_ns()
        await self._call("insert", self.cache.insert, key, response)
        self.stats.record_cache(False, lookup_ns + time.monotonic_ns() - insert_start)
        return response

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            if self.blocking:
                return await asyncio.to_thread(fn, *args)
            return fn(*args)
        except Exception as exc:  # a broken cache must never fail a request
            self._log_error(what, exc)
            return None

    def _log_error(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_error_log < _ERROR_LOG_INTERVAL_S:
            return
        self._last_error_log = now
        log.error(
            "response cache %s failed for model '%s' version %d (serving without the cache; "
            "further errors muted for %.0f s): %s: %s",
            what,
            self.model_name,
            self.version,
            _ERROR_LOG_INTERVAL_S,
            type(exc).__name__,
            exc,
        )


def frozen_copy(response: InferResponse) -> InferResponse:
    """A copy of ``response`` that owns read-only copies of its output arrays."""
    outputs = []
    for t in response.outputs:
        data = np.array(t.data, copy=True)
        data.flags.writeable = False
        outputs.append(InferTensor(t.name, t.datatype, tuple(t.shape), data, dict(t.parameters)))
    return InferResponse(response.model_name, response.model_version, "", outputs, dict(response.parameters))
