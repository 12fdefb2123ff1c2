"""The local control channel between workers: one JSON line asked, one JSON line answered.

Each worker serves its own Unix socket from a thread (:class:`ControlServer`), so a peer's
question never waits for the worker's event loop unless the operation needs it (a model load).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.contracts.errors import ErrorKind, InferdError

log = logging.getLogger(__name__)

#: What a worker does with one control request: ``handler(op, args) -> JSON-able result``.
Handler = Callable[[str, dict[str, Any]], Any]


#: The longest answer a worker reads (statistics of every model of a large repository fit).
MAX_REPLY = 64 * 1024 * 1024


def call(path: Path, op: str, args: dict[str, Any] | None = None, timeout: float | None = 2.0) -> Any:
    """Ask the worker at ``path``; its :class:`InferdError` is raised here with the same kind.

    ``OSError`` (no such worker, refused, timed out, closed) means the worker is not there.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(_request(op, args))
        with sock.makefile("rb") as stream:
            line = stream.readline()
    return _result(path, line)


async def acall(path: Path, op: str, args: dict[str, Any] | None = None, timeout: float | None = 2.0) -> Any:
    """:func:`call` on the event loop: waiting for the answer blocks nothing else.

    A worker that does not answer within ``timeout`` (stopped, wedged) raises ``TimeoutError``, an ``OSError``.
    """

    async def ask() -> bytes:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_REPLY)
        try:
            writer.write(_request(op, args))
            return await reader.readline()
        finally:
            writer.close()

    try:
        line = await asyncio.wait_for(ask(), timeout)
    except TimeoutError:
        raise TimeoutError(f"worker at {path} did not answer {op} within {timeout} s") from None
    return _result(path, line)


def _request(op: str, args: dict[str, Any] | None) -> bytes:
    return json.dumps({"op": op, "args": args or {}}).encode() + b"\n"


def _result(path: Path, line: bytes) -> Any:
    if not line:
        raise ConnectionError(f"worker at {path} closed the control connection")
    reply = json.loads(line)
    if "error" in reply:
        raise InferdError(reply["error"]["message"], ErrorKind(reply["error"]["kind"]))
    return reply["result"]


class _Connection(socketserver.StreamRequestHandler):
    server: _UnixServer

    def handle(self) -> None:
        line = self.rfile.readline()
        if not line:
            return
        request = json.loads(line)
        try:
            reply: dict[str, Any] = {"result": self.server.handler(request["op"], request.get("args") or {})}
        except InferdError as exc:
            reply = {"error": {"kind": exc.kind.value, "message": exc.message}}
        except Exception as exc:  # a peer's question must never take this worker down
            log.exception("control request %r failed", request.get("op"))
            reply = {"error": {"kind": ErrorKind.INTERNAL.value, "message": f"{type(exc).__name__}: {exc}"}}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, handler: Handler) -> None:
        self.handler = handler
        super().__init__(path, _Connection)


class ControlServer:
    """Serves ``handler`` on the Unix socket ``path`` (a stale file there is replaced)."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self.handler = handler
        self._server: _UnixServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self._server = _UnixServer(str(self.path), self.handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="inferd-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
        self._server = None
