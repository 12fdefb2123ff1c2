"""An inferd server inside another server's process (Ray Serve's replicas): the interface a host
of inferd sees. The implementation is the command line's (``inferd.host.embedded``)."""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane


class EmbeddedServer(abc.ABC):
    """``inferd serve ARGV``'s models and data plane in this process; :attr:`app` answers its HTTP
    API (KServe v2 and Triton's extensions) as ASGI for the host's own server.

    Build one with :meth:`from_argv`. ``await start()`` loads the models, ``await stop()`` drains
    and unloads them.
    """

    #: The HTTP API as an ASGI application, behind ``--http-max-input-size``.
    app: Any

    @staticmethod
    def from_argv(argv: Sequence[str]) -> EmbeddedServer:
        """The server ``inferd serve ARGV`` would run, without listeners: ``argv`` are ``inferd
        serve``'s flags (``--model-repository``, ``--model-control-mode``, ...); the listeners'
        flags are ignored (no port is opened) and ``--workers`` is 1, the default here (the host
        runs several of these, one a process). A bad flag raises ``StartupError`` naming it."""
        module = importlib.import_module("inferd.host.embedded")  # the command line's: loaded by name
        server: EmbeddedServer = module.HostedServer(argv)
        return server

    @property
    @abc.abstractmethod
    def dataplane(self) -> DataPlane:
        """The server's data plane (model control, metadata, statistics)."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the start-up models (``--model-control-mode``, ``--load-model``)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Drain in-flight requests and unload every model."""

    @abc.abstractmethod
    def pending_requests(self) -> int:
        """Requests waiting in the models' schedulers (Triton's ``nv_inference_pending_request_count``, summed)."""
