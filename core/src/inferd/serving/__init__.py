"""The serving package: inferd's HTTP/1.1 and HTTP/2 servers, the only code that touches zttp or
httptools, behind a small seam, and the limits a request body meets (its size, its JSON nesting).

Other modules import from here only. Importing this package imports neither library (plugin
discovery imports it for the body limit's constants); the servers import them when they start.
What is used from which library, at which version: :mod:`inferd.serving.internals`.
"""

from __future__ import annotations

from inferd.serving.direct import DirectRoutes, Handler, Headers, Reply
from inferd.serving.h2_stream import UnaryHandler, UnaryRoute, UnaryStream
from inferd.serving.http1 import (
    HTTP_HEADER_TIMEOUT,
    HTTP_MAX_HEADER_SIZE,
    HTTP_MAX_INPUT_SIZE,
    TOO_LARGE,
    AsgiServer,
    BodyLimit,
    BodyTooLarge,
)
from inferd.serving.json_depth import MAX_JSON_DEPTH, TOO_DEEP, depth_problem, nested_deeper_than
from inferd.serving.runner import H2Server, Runner, bind, run

__all__ = [
    "HTTP_HEADER_TIMEOUT",
    "HTTP_MAX_HEADER_SIZE",
    "HTTP_MAX_INPUT_SIZE",
    "MAX_JSON_DEPTH",
    "TOO_DEEP",
    "TOO_LARGE",
    "AsgiServer",
    "BodyLimit",
    "BodyTooLarge",
    "DirectRoutes",
    "H2Server",
    "Handler",
    "Headers",
    "Reply",
    "Runner",
    "UnaryHandler",
    "UnaryRoute",
    "UnaryStream",
    "bind",
    "depth_problem",
    "nested_deeper_than",
    "run",
]
