"""What the traffic-split and canary tests share: their models' config, and calls to the server's REST API."""

from __future__ import annotations

import re
import socket
from typing import Any

from inferd.testing import ServerProcess
from tests.http_calls import json_call

#: A versioned model's config: V = the version that answered, X echoed; ``{name}`` and ``{parameters}`` to fill.
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "V" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{parameters}
"""


def parameters(**values: str) -> str:
    """``parameters { key: ... }`` lines of a config, one per value."""
    return "\n".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items())


def call(server: ServerProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A REST call to the server: its status and its JSON answer."""
    return json_call(f"http://{server.http_url}{path}", method, body, timeout=30)


def pipelined(server: ServerProcess, model: str, bodies: list[bytes], depth: int = 256) -> list[tuple[int, bytes]]:
    """(status, body) of each request, sent pipelined ``depth`` at a time on one HTTP/1.1 connection."""
    out: list[tuple[int, bytes]] = []
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        reader = sock.makefile("rb")
        for start in range(0, len(bodies), depth):
            chunk = bodies[start : start + depth]
            sock.sendall(b"".join(
                f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(b)}\r\n\r\n".encode() + b for b in chunk
            ))  # fmt: skip
            for _ in chunk:
                status = int(reader.readline().split()[1])
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                out.append((status, reader.read(length)))
    return out


def versions_of(replies: list[tuple[int, bytes]]) -> list[str]:
    """The ``model_version`` of each reply ("failed" for a non-200)."""
    found = re.compile(rb'"model_version":"(\d+)"')
    return [
        m.group(1).decode() if status == 200 and (m := found.search(body)) else "failed" for status, body in replies
    ]
