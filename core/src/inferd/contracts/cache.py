"""The response-cache contract: a cache plugin stores responses keyed by request contents."""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from inferd.contracts.types import InferResponse, InferTensor


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


def frozen_copy(response: InferResponse) -> InferResponse:
    """A copy of ``response`` that owns read-only copies of its output arrays."""
    outputs = []
    for t in response.outputs:
        data = np.array(t.data, copy=True)
        data.flags.writeable = False
        outputs.append(InferTensor(t.name, t.datatype, tuple(t.shape), data, dict(t.parameters)))
    return InferResponse(response.model_name, response.model_version, "", outputs, dict(response.parameters))
