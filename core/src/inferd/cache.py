"""The response-cache contract: a cache plugin stores responses keyed by request contents."""

from __future__ import annotations

import abc

from inferd.types import InferResponse


class ResponseCache(abc.ABC):
    """A response cache made by a factory registered through ``inferd_register_caches``.

    Keys are computed by core from the model name, version, inputs and parameters; caches only
    store and evict. Both methods may block briefly and are called off the event loop.
    """

    @abc.abstractmethod
    def lookup(self, key: bytes) -> InferResponse | None:
        """The stored response for ``key``, or None."""

    @abc.abstractmethod
    def insert(self, key: bytes, response: InferResponse) -> None:
        """Store ``response`` under ``key`` (may evict older entries)."""
