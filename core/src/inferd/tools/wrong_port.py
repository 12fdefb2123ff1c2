"""Telling a client it was pointed at the other protocol's port: an HTTP/1.1 client at a gRPC
port (which answers with an HTTP/2 SETTINGS frame), or a gRPC client at an HTTP/1.1 port."""

from __future__ import annotations

import re

#: An HTTP/2 frame header of type SETTINGS (4), the first thing a gRPC port sends: a 3-byte length
#: (under 256 here), then the type; as raw text (``BadStatusLine``) or escaped (aiohttp's message).
_SETTINGS_FRAME = re.compile(r"\x00\x00[\x00-\xff]\x04|(?:\\+x00){2}(?:\\+x[0-9a-f]{2}|[ -~])\\+x04")
#: What grpcio says when the port answered HTTP/1.1.
_HTTP1_ANSWER = "Trying to connect an http1.x server"


def answered_http2(error: str) -> bool:
    """Whether an HTTP/1.1 client's ``error`` shows the server answered HTTP/2 (a gRPC port)."""
    return _SETTINGS_FRAME.search(error) is not None


def answered_http1(error: str) -> bool:
    """Whether a gRPC client's ``error`` shows the server answered HTTP/1.1 (an HTTP port)."""
    return _HTTP1_ANSWER in error


def grpc_port(address: str, instead: str) -> str:
    """The sentence for an HTTP client at ``address``, a gRPC port; ``instead`` says what to use."""
    return f"{address} answers HTTP/2: it looks like a gRPC port (8001 by default), not the HTTP port; {instead}"


def http_port(address: str, instead: str) -> str:
    """The sentence for a gRPC client at ``address``, an HTTP/1.1 port; ``instead`` says what to use."""
    return f"{address} answers HTTP/1.1: it looks like the HTTP port (8000 by default), not a gRPC port; {instead}"
