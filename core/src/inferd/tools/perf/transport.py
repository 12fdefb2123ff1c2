"""The protocol side of the tool: control calls through tritonclient's aio clients, and a lean,
callback-driven inference path that sends requests encoded once, before measuring.

Why not tritonclient's ``infer`` for the load itself: measured on a 2-core machine against inferd,
the tool's own CPU time per request was ~730 us with aiohttp (what ``tritonclient.http.aio``
uses) against ~130 us with the plain HTTP/1.1 connections of :mod:`transport_http`, and ~530 us
with ``grpc.aio`` against ~360 us with the synchronous channel's futures of
:mod:`transport_grpc`. A load generator sharing cores with the server must stay out of its way.

``send(prepared, seq, done)`` starts a request and returns at once; ``done(send_ns, recv_ns,
responses, first_response_at_ns, error)`` is called when it completes, on the event loop (HTTP)
or on a gRPC thread: the time the tool spent encoding the request (0 when encoded ahead) and
decoding the response(s), how many responses came back, when the first one arrived (streams;
0 otherwise), or the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from inferd.tools import ToolError
from inferd.tools.perf.inputs import Entry
from inferd.tools.perf.model import ModelInfo, model_info
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.server_stats import ServerStats, parse_stats
from inferd.tools.perf.shm import Placed
from inferd.tools.wrong_port import answered_http1, answered_http2, grpc_port, http_port

log = logging.getLogger(__name__)

#: ``(sequence_id, start, end)`` for a request of a sequence model, else None.
SequenceFlags = tuple[int, bool, bool] | None
Done = Callable[[int, int, int, int, "RequestError | None"], None]


class RequestError(ToolError):
    """An inference request failed."""


class Transport(Protocol):
    """One connection to the server under test."""

    #: Set by the session from the model config: streams then wait for the final-response flag.
    decoupled: bool
    #: False once the server has refused a statistics request (the tool goes on without them).
    server_stats: bool

    async def model_info(self) -> ModelInfo: ...

    async def stats(self) -> ServerStats: ...

    async def load(self, config_json: str | None) -> None: ...

    async def unload(self) -> None: ...

    async def register_region(self, name: str, key: str, byte_size: int) -> None: ...

    async def unregister_region(self, name: str) -> None: ...

    def prepare(self, entry: Entry, datatypes: dict[str, str], placed: Placed | None = None) -> Any:
        """Encode one request; with ``placed``, its tensors are in those shared-memory regions."""
        ...

    def send(self, prepared: Any, seq: SequenceFlags, done: Done) -> None: ...

    async def close(self) -> None: ...


def strip_scheme(url: str) -> str:
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            return url[len(scheme) :]
    return url


class ControlMixin:
    """Control calls shared by both protocols (``self._client`` is a tritonclient aio client)."""

    _client: Any
    opts: PerfOptions
    _exc: type[Exception]
    decoupled: bool = False
    server_stats: bool = True

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except self._exc as exc:
            message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
            raise ToolError(f"{what}: {self._wrong_port(message) or message}") from None
        except Exception as exc:  # connection refused, reset, timeout: whatever the client library raises
            unreachable = f"cannot reach {self.opts.protocol} server at {self.opts.url}: {exc}"
            raise ToolError(f"{what}: {self._wrong_port(str(exc)) or unreachable}") from None

    def _wrong_port(self, error: str) -> str:
        """The sentence for an ``error`` that shows the other protocol's port answered ("" if not)."""
        address = strip_scheme(self.opts.url)
        if self.opts.protocol == "http" and answered_http2(error):
            return grpc_port(address, "add -i grpc to measure over gRPC, or give the HTTP port with -u")
        if self.opts.protocol == "grpc" and answered_http1(error):
            return http_port(address, "leave out -i grpc to measure over HTTP, or give the gRPC port with -u")
        return ""

    async def model_info(self) -> ModelInfo:
        o = self.opts
        where = f"model '{o.model}'" + (f" version {o.version}" if o.version else "")
        meta = await self._call(f"metadata of {where}", self._client.get_model_metadata(o.model, o.version))
        config = await self._call(f"config of {where}", self._get_config())
        return model_info(meta, config, o.version)

    async def _get_config(self) -> Any:
        raise NotImplementedError

    async def stats(self) -> ServerStats:
        """The model's statistics; zeros (and a warning, once) where the server has none."""
        if not self.server_stats:
            return ServerStats()
        o = self.opts
        try:
            raw = await self._call(f"statistics of model '{o.model}'", self._get_stats())
        except ToolError as exc:
            log.warning("no server-side statistics: %s", exc)
            self.server_stats = False
            return ServerStats()
        return parse_stats(raw, o.model)

    async def _get_stats(self) -> Any:
        return await self._client.get_inference_statistics(self.opts.model, self.opts.version)

    async def load(self, config_json: str | None) -> None:
        what = f"loading model '{self.opts.model}'" + (" with a config override" if config_json else "")
        await self._call(what, self._client.load_model(self.opts.model, config=config_json))

    async def unload(self) -> None:
        await self._call(f"unloading model '{self.opts.model}'", self._client.unload_model(self.opts.model))

    async def register_region(self, name: str, key: str, byte_size: int) -> None:
        """Register a system shared-memory region with the server."""
        what = f"registering system shared memory region '{name}'"
        await self._call(what, self._client.register_system_shared_memory(name, key, byte_size))

    async def unregister_region(self, name: str) -> None:
        what = f"unregistering system shared memory region '{name}'"
        await self._call(what, self._client.unregister_system_shared_memory(name))
