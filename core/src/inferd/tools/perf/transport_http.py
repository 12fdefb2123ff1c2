"""KServe v2 HTTP: binary tensor data (Triton's extension) by default, encoded once per entry,
sent over plain keep-alive HTTP/1.1 connections (one per in-flight request)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from inferd.tools.perf.http11 import Connection, Response
from inferd.tools.perf.inputs import Entry, raw_bytes
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.shm import Placed
from inferd.tools.perf.transport import ControlMixin, Done, RequestError, SequenceFlags, strip_scheme

_HEADER_LENGTH = b"inference-header-content-length"


@dataclass(slots=True)
class HttpRequest:
    """A request encoded ahead (``wire``: request line, headers and body), and its JSON header and
    binary blob to re-encode it with sequence parameters."""

    header: dict[str, Any]
    blob: bytes
    wire: bytes


class HttpTransport(ControlMixin):
    """Inference over a pool of HTTP/1.1 connections; tritonclient's aio client for metadata,
    config, statistics and the load API."""

    _exc = InferenceServerException

    def __init__(self, opts: PerfOptions) -> None:
        self.opts = opts
        self._host = strip_scheme(opts.url).rstrip("/")
        host, sep, port = self._host.rpartition(":")
        self._addr = (host.strip("[]"), int(port)) if sep and port.isdigit() else (self._host, 80)
        self._client = httpaio.InferenceServerClient(self._host)
        version = f"/versions/{quote(opts.version)}" if opts.version else ""
        self._path = f"/v2/models/{quote(opts.model)}{version}/infer"
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._binary_in = opts.input_tensor_format == "binary" and opts.shared_memory == "none"

    async def _get_config(self) -> Any:
        return await self._client.get_model_config(self.opts.model, self.opts.version)

    def prepare(self, entry: Entry, datatypes: dict[str, str], placed: Placed | None = None) -> HttpRequest:
        inputs, blobs = [], []
        for name, array in entry.items():
            datatype = datatypes[name]
            spec: dict[str, Any] = {"name": name, "shape": list(array.shape), "datatype": datatype}
            if placed is not None:
                region, size = placed.inputs[name]
                spec["parameters"] = {"shared_memory_region": region, "shared_memory_byte_size": size}
            elif self._binary_in:
                data = raw_bytes(array, datatype)
                spec["parameters"] = {"binary_data_size": len(data)}
                blobs.append(data)
            else:
                flat = array.reshape(-1).tolist()
                spec["data"] = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in flat]
            inputs.append(spec)
        header: dict[str, Any] = {
            "inputs": inputs,
            "parameters": {"binary_data_output": self.opts.output_tensor_format == "binary"},
        }
        if placed is not None:
            header["outputs"] = [
                {"name": name, "parameters": {"shared_memory_region": region, "shared_memory_byte_size": size}}
                for name, (region, size) in placed.outputs.items()
            ]
        blob = b"".join(blobs)
        return HttpRequest(header, blob, self._encode(header, blob))

    def _encode(self, header: dict[str, Any], blob: bytes) -> bytes:
        head = json.dumps(header, separators=(",", ":")).encode()
        lines = [f"POST {self._path} HTTP/1.1", f"Host: {self._host}", f"Content-Length: {len(head) + len(blob)}"]
        if self._binary_in:
            lines += ["Content-Type: application/octet-stream", f"Inference-Header-Content-Length: {len(head)}"]
        else:
            lines.append("Content-Type: application/json")
        lines += [f"{k}: {v}" for k, v in self.opts.http_headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + head + blob

    def send(self, req: HttpRequest, seq: SequenceFlags, done: Done) -> None:
        send_ns, wire = 0, req.wire
        if seq is not None:
            t0 = time.perf_counter_ns()
            params = {
                **req.header["parameters"],
                "sequence_id": seq[0],
                "sequence_start": seq[1],
                "sequence_end": seq[2],
            }
            wire = self._encode({**req.header, "parameters": params}, req.blob)
            send_ns = time.perf_counter_ns() - t0

        def finish(response: Response | None, error: str | None, retryable: bool = False) -> None:
            if retryable:  # a kept-alive connection the server had dropped: once more on a new one
                asyncio.ensure_future(self._connect_and_send(wire, finish))
                return
            if error is not None or response is None:
                done(send_ns, 0, 0, 0, RequestError(f"HTTP request to {self._host}{self._path} failed: {error}"))
                return
            t1 = time.perf_counter_ns()
            err = _check(response)
            done(send_ns, time.perf_counter_ns() - t1, 1, 0, err)

        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                conn.request(wire, finish)
                return
            self._all.discard(conn)
        asyncio.ensure_future(self._connect_and_send(wire, finish))

    async def _connect_and_send(self, wire: bytes, finish: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(lambda: Connection(self._release), *self._addr)
        except OSError as exc:
            finish(None, f"cannot connect: {exc}", False)
            return
        self._all.add(conn)
        conn.request(wire, finish)

    def _release(self, conn: Connection) -> None:
        if conn.usable:
            self._idle.append(conn)
        else:
            self._all.discard(conn)

    async def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await self._client.close()


def _check(response: Response) -> RequestError | None:
    """Parse the JSON header of the response; an error for anything but 200."""
    length = response.headers.get(_HEADER_LENGTH)
    body = response.body
    try:
        parsed = json.loads(body[: int(length)] if length else body)
    except ValueError:
        parsed = {"error": bytes(body[:200]).decode(errors="replace")}
    if response.status != 200:
        detail = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        return RequestError(f"inference failed with HTTP {response.status}: {detail}")
    return None
