"""What the traffic-split and canary tests share: their models' config, and calls to the server's REST API."""

from __future__ import annotations

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
