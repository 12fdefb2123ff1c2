"""A minimal response-cache plugin: cache "dict", a bounded in-memory map.

Select it with ``--cache-config dict,max_entries=100``; a model opts in with
``response_cache { enable: true }``. Core computes the keys; a cache only stores and evicts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from inferd.api import CacheRegister, InferResponse, InvalidArgument, ResponseCache, frozen_copy, hookimpl

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


class DictCache(ResponseCache):
    """First in, first out once ``max_entries`` is reached. Thread-safe, as the contract asks."""

    blocking = False  # no I/O: core calls lookup/insert on the event loop

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.entries: OrderedDict[bytes, InferResponse] = OrderedDict()
        self.lock = threading.Lock()

    def lookup(self, key: bytes) -> InferResponse | None:
        with self.lock:
            return self.entries.get(key)

    def insert(self, key: bytes, response: InferResponse) -> None:
        stored = frozen_copy(response)  # read-only copies: callers cannot change what is stored
        with self.lock:
            self.entries[key] = stored
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)

    def close(self) -> None:
        with self.lock:
            self.entries.clear()


def create_dict_cache(settings: dict[str, str]) -> DictCache:
    """``settings`` are the ``--cache-config dict,<key>=<value>`` pairs, as strings."""
    unknown = sorted(set(settings) - {"max_entries"})
    if unknown:
        raise InvalidArgument(f"dict cache: unknown setting '{unknown[0]}'; it accepts: max_entries")
    raw = settings.get("max_entries", "1000")
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgument(f"dict cache: 'max_entries' must be a positive integer, got '{raw}'")
    return DictCache(int(raw))


@hookimpl
def inferd_register_caches(register: CacheRegister) -> None:
    register("dict", create_dict_cache)
