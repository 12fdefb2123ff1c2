"""The response-cache contract: a cache plugin stores responses keyed by request contents."""

from __future__ import annotations

import abc
from typing import ClassVar

from inferd.contracts.types import InferResponse


class ResponseCache(abc.ABC):
    """A response cache made by a factory registered through ``inferd_register_caches``.

    Keys are computed by core (:mod:`inferd.engine.response_cache`) from the model name, version,
    inputs, requested outputs and request parameters; caches only store and evict.

    ``blocking`` says how core calls :meth:`lookup` and :meth:`insert`: ``False`` (an in-memory
    cache whose calls take microseconds) runs them inline on the event loop; ``True`` (anything
    that does I/O, e.g. a network cache) runs them in a worker thread. Both methods must be
    thread-safe. A cache must not let a caller mutate what it stored: copy on insert (or
    serialize), and hand out read-only arrays or fresh ones on lookup. Exceptions from either
    method are logged by core and the request goes on as a miss.
    """

    #: Whether lookup/insert may block (I/O): core then calls them off the event loop.
    blocking: ClassVar[bool] = True

    @abc.abstractmethod
    def lookup(self, key: bytes) -> InferResponse | None:
        """The stored response for ``key``, or None."""

    @abc.abstractmethod
    def insert(self, key: bytes, response: InferResponse) -> None:
        """Store ``response`` under ``key`` (may evict older entries)."""

    def close(self) -> None:
        """Release connections or memory when the server stops (optional)."""
