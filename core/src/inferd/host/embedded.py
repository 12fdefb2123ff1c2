"""``inferd serve``'s server inside another server's process (``inferd.api.EmbeddedServer``): its data
plane and its HTTP app (ASGI), without listeners of its own, for a host that owns the sockets (Ray
Serve's replicas)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inferd.auth import AuthConfigError, RestrictionError, access_from_flags
from inferd.contracts.embedded import EmbeddedServer
from inferd.contracts.errors import StartupError
from inferd.frontends.http.app import HttpApp
from inferd.host.plugins import PluginHost
from inferd.host.serve_command import build_parser, options_from_args
from inferd.host.server import Server
from inferd.serving import BodyLimit

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane


class HostedServer(EmbeddedServer):
    """:class:`~inferd.contracts.embedded.EmbeddedServer` on the command line's parser and a :class:`Server`."""

    def __init__(self, argv: Sequence[str]) -> None:
        """Parse ``argv`` as ``inferd serve`` does and build the server (nothing loads yet)."""
        host = PluginHost()
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = build_parser(host).parse_args(["serve", *argv])
        except SystemExit:
            lines = errors.getvalue().splitlines()
            raise StartupError(next((line for line in lines if ": error: " in line), " ".join(lines))) from None
        if args.workers == "auto":  # the default: one process here, the host runs several
            args.workers = 1
        if args.workers != 1:
            raise StartupError("--workers: an embedded server is one process (the host runs several)")
        try:
            access = access_from_flags(args.http_restricted_api, args.grpc_restricted_protocol, args.auth_config)
        except (RestrictionError, AuthConfigError) as exc:
            raise StartupError(f"inferd serve: {exc}") from None
        options = options_from_args(args)
        options.allow_http = options.allow_grpc = options.allow_metrics = False
        options.settle_gc = False  # the host's process: its collector settings stay
        self.server: Server = Server(options, host=host, access=access)
        http = options.http
        self.app: Any = BodyLimit(HttpApp(self.server.dataplane, http.forward_pattern), http.max_input_size)

    @property
    def dataplane(self) -> DataPlane:
        """The server's data plane (model control, metadata, statistics)."""
        return self.server.dataplane

    async def start(self) -> None:
        """Load the start-up models (``--model-control-mode``, ``--load-model``)."""
        await self.server.start()

    async def stop(self) -> None:
        """Drain in-flight requests and unload every model."""
        await self.server.stop()

    def pending_requests(self) -> int:
        """Requests waiting in the models' schedulers (Triton's ``nv_inference_pending_request_count``, summed)."""
        total = 0
        for version in self.server.dataplane.serving_versions():
            pending = getattr(getattr(version, "scheduler", None), "pending", None)
            total += int(pending()) if callable(pending) else 0
        return total
