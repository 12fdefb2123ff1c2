"""What a response carries besides its body for gateways and billing (docs/traffic.md): the
``Server-Timing`` header of a request that asked for its timings, and ``x-tokens-used``, the
token counts of a request whose model (or frontend) counted them. HTTP answers them as response
headers, gRPC as trailing metadata; both read the response's parameters, so a response without
parameters (the usual case) costs one check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The response header (gRPC: trailing metadata) with the request's timings.
SERVER_TIMING = "server-timing"
#: The response header (gRPC: trailing metadata) with the request's token counts.
TOKENS_USED = "x-tokens-used"

#: The ``timing_*_us`` response parameters by ``Server-Timing`` metric name.
_SERVER_TIMING = (
    ("queue", "timing_queue_us"),
    ("compute_input", "timing_compute_input_us"),
    ("infer", "timing_compute_infer_us"),
    ("output", "timing_compute_output_us"),
    ("total", "timing_total_us"),
)


def server_timing(parameters: Mapping[str, Any]) -> str:
    """The ``Server-Timing`` value (W3C; durations in milliseconds) of a request that asked for
    its timings: what its ``timing_*_us`` response parameters say."""
    return ", ".join(f"{name};dur={parameters[key] / 1000:g}" for name, key in _SERVER_TIMING if key in parameters)


def tokens_used(prompt: int, completion: int) -> str:
    """The ``x-tokens-used`` value: ``prompt=12, completion=34``."""
    return f"prompt={prompt}, completion={completion}"


def reply_headers(parameters: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``server-timing`` and ``x-tokens-used`` for a response with these parameters (either may be
    absent; an empty list when neither applies). Call it only when ``parameters`` is not empty."""
    out: list[tuple[str, str]] = []
    if "timing_total_us" in parameters:
        out.append((SERVER_TIMING, server_timing(parameters)))
    if "prompt_tokens" in parameters or "completion_tokens" in parameters:
        out.append(
            (
                TOKENS_USED,
                tokens_used(_count(parameters.get("prompt_tokens")), _count(parameters.get("completion_tokens"))),
            )
        )
    return out


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
