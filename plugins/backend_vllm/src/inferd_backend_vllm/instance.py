"""One vLLM instance: hands each request of a batch to the version's engine, which batches them itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from inferd.api import AsyncInstance, InferdError, InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd_backend_vllm.engine import Engine


class VllmInstance(AsyncInstance):
    """Hands each request to the engine; responses go out through the request's sender.

    Asynchronous: ``execute`` runs on the event loop, where it only starts each request's task."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        for request in requests:
            self.engine.submit(request)
        return []
