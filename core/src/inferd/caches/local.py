"""The built-in ``local`` response cache: in memory, bounded in bytes, least recently used out.

``--cache-config local,size=BYTES`` (Triton's spelling; ``size`` is required). One cache is
shared by every model that enables ``response_cache``. Entries hold read-only copies of the
output arrays, so nothing a caller does to a response changes what is stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from inferd.api import frozen_copy
from inferd.contracts.cache import ResponseCache
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.hookspecs import CacheRegister, hookimpl
from inferd.contracts.types import InferResponse

#: Bookkeeping charged per entry and per output tensor, on top of the tensor bytes.
ENTRY_OVERHEAD = 128
TENSOR_OVERHEAD = 64
#: Per BYTES element: its 4-byte length, as on the wire.
BYTES_ELEMENT_OVERHEAD = 4


def entry_size(key: bytes, response: InferResponse) -> int:
    """Bytes an entry is charged: tensor data, BYTES element lengths, and fixed overheads."""
    size = ENTRY_OVERHEAD + len(key)
    for t in response.outputs:
        size += TENSOR_OVERHEAD + len(t.name) + 8 * len(t.shape)
        if t.datatype == "BYTES":
            for item in np.asarray(t.data).reshape(-1):
                size += BYTES_ELEMENT_OVERHEAD + (len(item) if isinstance(item, (bytes, bytearray, str)) else 0)
        else:
            size += int(np.asarray(t.data).nbytes)
    return size


class LocalCache(ResponseCache):
    """A thread-safe LRU map from key to response, bounded by the sum of entry sizes."""

    blocking = False

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise InvalidArgument(f"local cache: 'size' must be a positive number of bytes, got {size}")
        self.capacity = size
        self.used = 0
        self._entries: OrderedDict[bytes, tuple[InferResponse, int]] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, key: bytes) -> InferResponse | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def insert(self, key: bytes, response: InferResponse) -> None:
        size = entry_size(key, response)
        if size > self.capacity:
            return  # larger than the whole cache: never stored (Triton does the same)
        stored = frozen_copy(response)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used -= old[1]
            while self._entries and self.used + size > self.capacity:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.used -= evicted
            self._entries[key] = (stored, size)
            self.used += size

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0


def create_local_cache(settings: dict[str, str]) -> LocalCache:
    """Build the cache from ``--cache-config local,...`` settings (``size`` in bytes)."""
    unknown = sorted(set(settings) - {"size"})
    if unknown:
        raise InvalidArgument(f"local cache: unknown setting '{unknown[0]}'; it accepts: size")
    raw = settings.get("size")
    if raw is None:
        raise InvalidArgument("local cache needs a size in bytes: --cache-config local,size=1048576")
    try:
        size = int(raw)
    except ValueError:
        raise InvalidArgument(f"local cache: 'size' must be a whole number of bytes, got '{raw}'") from None
    return LocalCache(size)


@hookimpl
def inferd_register_caches(register: CacheRegister) -> None:
    """Register the ``local`` cache."""
    register("local", create_local_cache)
