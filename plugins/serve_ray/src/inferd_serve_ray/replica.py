"""One Ray Serve replica: an :class:`~inferd.api.EmbeddedServer` whose HTTP app (KServe v2 and
Triton's extensions) Ray's HTTP proxy calls, with multiplexed model ids mapped to inferd's explicit
model control and routing stats from the server's queues."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ray import serve

from inferd.api import EmbeddedServer, InferdError

log = logging.getLogger("inferd.serve_ray")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class LoadedModel:
    """What ``@serve.multiplexed`` caches for one model id: Ray calls :meth:`__del__` when its LRU
    evicts the id, and inferd unloads the model then (a model loaded at start-up stays)."""

    def __init__(self, replica: InferdReplica, name: str, pinned: bool) -> None:
        self.replica = replica
        self.name = name
        #: Loaded at the replica's start (``--load-model``): serves requests without an id too.
        self.pinned = pinned
        self._released = False

    def __del__(self) -> None:
        """Unload the model (once): Ray calls this in a thread of its executor on eviction; the
        collector may call it again, on any thread, where it does nothing more."""
        if self._released or self.pinned:
            return
        self._released = True
        replica = self.replica
        loop = replica.loop
        if loop is None or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(replica.unload(self.name), loop)
        if threading.get_ident() != replica.loop_thread:  # Ray's executor: wait, so the next load finds room
            future.result()


class InferdReplica:
    """The deployment's class (wrapped by ``serve.ingress``): ``argv`` are ``inferd serve``'s flags."""

    def __init__(self, argv: Sequence[str], max_models: int = 3) -> None:
        self.argv = list(argv)
        self.server = EmbeddedServer.from_argv(self.argv)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0
        #: Requests in this replica now (waiting for their multiplexed model to load, or in inferd's app).
        self.ongoing = 0
        #: The models loaded at start-up: they stay loaded whatever the multiplexing evicts.
        self.pinned: frozenset[str] = frozenset()

        async def load(model_id: str) -> LoadedModel:  # a function: Ray keeps its LRU on the function
            return await self._load(model_id)

        self._model = serve.multiplexed(max_num_models_per_replica=max_models)(load)

    async def start(self) -> None:
        """Load the start-up models (Ray's replica is ready once this returns)."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        await self.server.start()
        self.pinned = frozenset(self.loaded_models())

    def loaded_models(self) -> list[str]:
        """The names of the models with a version serving now."""
        return sorted({m.name for m in self.server.dataplane.served_models()})

    async def _load(self, model_id: str) -> LoadedModel:
        """``@serve.multiplexed``'s loader: ``model_id`` is a model name of the repository."""
        if model_id in self.pinned:
            return LoadedModel(self, model_id, pinned=True)
        if not await self.server.dataplane.model_ready(model_id):
            log.info("loading model '%s' for multiplexed model id '%s'", model_id, model_id)
            await self.server.dataplane.load_model(model_id)
        return LoadedModel(self, model_id, pinned=False)

    async def unload(self, name: str) -> None:
        """Unload ``name`` (evicted by the multiplexing's LRU)."""
        log.info("unloading model '%s': evicted from this replica's multiplexed models", name)
        try:
            await self.server.dataplane.unload_model(name)
        except InferdError as exc:
            log.warning("unloading model '%s': %s", name, exc.message)

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app Ray's proxy calls: lifespan here, HTTP to inferd's app once the request's
        multiplexed model (header ``serve_multiplexed_model_id``) is loaded."""
        if scope["type"] == "lifespan":
            await _lifespan(self, receive, send)
            return
        if scope["type"] != "http":
            return
        self.ongoing += 1
        try:
            model_id = serve.get_multiplexed_model_id()
            if model_id:
                try:
                    await self._model(model_id)
                except InferdError as exc:  # Triton's load failure ("failed to load 'x', ...") as its load API answers
                    await _error(send, 400, exc.message)
                    return
            await self.server.app(scope, receive, send)
        finally:
            self.ongoing -= 1

    def routing_stats(self) -> dict[str, Any]:
        """What ``record_routing_stats`` reports to Ray's request router."""
        return {
            "queue_depth": self.server.pending_requests(),
            "ongoing_requests": self.ongoing,
            "loaded_models": self.loaded_models(),
        }


async def _lifespan(replica: InferdReplica, receive: Receive, send: Send) -> None:
    """ASGI lifespan: start-up loads the models, shutdown drains and unloads them."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await replica.start()
            except Exception as exc:  # Ray reports the failed start and retries the replica
                text = exc.message if isinstance(exc, InferdError) else repr(exc)
                await send({"type": "lifespan.startup.failed", "message": text})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await replica.server.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
