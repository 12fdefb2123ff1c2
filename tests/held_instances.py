"""A backend instance whose batches wait until the test answers them, for the engine's tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from inferd.contracts.backend import AsyncInstance, Started
from inferd.contracts.errors import InferdError
from inferd.contracts.types import InferRequest, InferResponse

Results = list[InferResponse | InferdError] | Started


class Pipelined(AsyncInstance):
    """An asynchronous instance that queues batches itself (as an isolated Python model's stub does)."""

    pipeline_depth = 2

    def __init__(self) -> None:
        self.held: list[tuple[Sequence[InferRequest], asyncio.Future[Results]]] = []

    async def execute(self, requests: Sequence[InferRequest]) -> Results:
        future: asyncio.Future[Results] = asyncio.get_running_loop().create_future()
        self.held.append((requests, future))
        return await future

    def answer(self) -> None:
        """Answer the oldest held batch, one response per request."""
        requests, future = self.held.pop(0)
        future.set_result([InferResponse("m", "1", r.id) for r in requests])
