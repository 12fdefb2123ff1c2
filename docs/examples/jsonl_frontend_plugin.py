"""A minimal frontend plugin: inference over a TCP socket, one JSON object per line.

``inferd serve ... --jsonl-port 9000`` turns it on (no flag: no frontend). Each request line is
``{"model": "add_sub", "id": "r1", "inputs": {"INPUT0": [[1, 2, 3, 4]], ...}}``; the answer line
is ``{"id": "r1", "outputs": {"OUTPUT0": [[...]], ...}}`` or ``{"id": "r1", "error": "...",
"kind": "INVALID_ARG"}``. Datatypes come from the model's metadata.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.api import (
    Frontend,
    FrontendRegister,
    InferdError,
    InferRequest,
    InferTensor,
    InvalidArgument,
    ServerSettings,
    hookimpl,
    numpy_dtype,
)

if TYPE_CHECKING:
    from inferd.api import DataPlane


class JsonLinesFrontend(Frontend):
    name = "JSON lines"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.dataplane: DataPlane | None = None
        self._server: asyncio.Server | None = None
        self._idle: set[asyncio.StreamWriter] = set()  # connections waiting for their next line
        self._open = 0
        self._all_closed = asyncio.Event()
        self._closing = False

    async def start(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # the real port when 0 was asked

    async def stop(self, grace: float) -> None:
        """No new connections; idle ones close now, busy ones after their answer (or ``grace``)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._idle):
            writer.close()  # their readline() returns b"" and the handler ends
        if self._open:
            try:
                await asyncio.wait_for(self._all_closed.wait(), grace)
            except TimeoutError:
                pass

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        self._all_closed.clear()
        try:
            while not self._closing:
                self._idle.add(writer)
                line = await reader.readline()
                self._idle.discard(writer)
                if not line:
                    break
                writer.write(json.dumps(await self._answer(line)).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass  # the client went away
        finally:
            self._idle.discard(writer)
            writer.close()
            self._open -= 1
            if not self._open:
                self._all_closed.set()

    async def _answer(self, line: bytes) -> dict[str, Any]:
        assert self.dataplane is not None
        message: Any = {}
        try:
            message = json.loads(line)
            if not isinstance(message, dict) or not isinstance(message.get("inputs"), dict):
                raise InvalidArgument("a request line must be an object with 'model' and 'inputs'")
            request = InferRequest(str(message.get("model", "")), id=str(message.get("id", "")))
            # Datatypes from the model's description; unknown input names are left to core's checks.
            info = self.dataplane.resolve(request.model_name)
            types = {t.name: t.datatype for t in info.inputs}
            for name, values in message["inputs"].items():
                datatype = types.get(name, "FP32")
                array = np.asarray(values, dtype=numpy_dtype(datatype))
                request.inputs[name] = InferTensor(name, datatype, array.shape, array)
            response = await self.dataplane.infer(request, info)  # on the version resolved above
            return {"id": response.id, "outputs": {t.name: t.data.tolist() for t in response.outputs}}
        except InferdError as exc:
            return {"id": str(message.get("id", "")) if isinstance(message, dict) else "",
                    "error": exc.message, "kind": exc.kind.value}  # fmt: skip
        except (ValueError, TypeError) as exc:
            return {"error": f"bad request line: {exc}", "kind": "INVALID_ARG"}


def _factory(options: ServerSettings) -> JsonLinesFrontend | None:
    port = options.extra.get("jsonl_port")
    if port is None:
        return None  # not asked for: the server runs without this frontend
    return JsonLinesFrontend(options.host, int(port))


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("jsonl", _factory)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jsonl-port", type=int, default=None, metavar="PORT",
                        help="serve JSON-lines inference on PORT (default: off)")  # fmt: skip
