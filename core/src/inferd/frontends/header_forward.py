"""Triton's header forwarding: ``--http-header-forward-pattern`` and ``--grpc-header-forward-pattern``.

The headers of an HTTP infer request, or the metadata of a gRPC ModelInfer call or ModelStreamInfer
stream, whose names match the pattern reach the model as request parameters of type string, added
after the request's own parameters: a header wins over a parameter of the same name, as a Python
model sees it in Triton (``json.loads(request.parameters())`` keeps the last of Triton's two keys).
They travel with the request into an ensemble's steps. As Triton reads the pattern: it is searched
for in the name (RE2's ``PartialMatch``), ignoring case unless it starts with ``(?-i)``; an empty
pattern matches every name.

Where inferd differs, on purpose (docs/configuration.md):

- names are lowercase (HTTP/1.1 names are case-insensitive; inferd's HTTP server, like HTTP/2 and
  gRPC, hands them over in lowercase), so ``(?-i)MY_HEADER.*`` matches nothing;
- HTTP/1.1 values lose their trailing whitespace too (RFC 9110 5.5; Triton keeps it), and a repeated
  header gives its last value (what a Python model reads from Triton's repeated keys);
- a matching header named as a reserved parameter (:data:`RESERVED`, or ``triton_...``) fails the
  request with INVALID_ARGUMENT, Triton's sentence: Triton 2.51 forwards it as a plain string, later
  Triton refuses it as here; in inferd those parameters steer scheduling (sequence, priority,
  timeout), so a header must not set them;
- the headers that carry inferd's own credentials (``authorization`` with ``--auth-config``, the
  restricted-API headers) are never forwarded: a pattern such as ``.*`` does not hand keys to models;
- gRPC ``-bin`` metadata is not forwarded (its values are bytes, not strings), nor the transport's
  own headers (content type, ``te``, ``:authority``, ``grpc-*``), as grpc's servers leave them out of a
  call's metadata.

A server without the flag builds no :class:`HeaderForward`: the frontends skip all of this.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from typing import Any

from inferd.contracts.errors import InvalidArgument

#: Triton's reserved parameter names (``kReservedParameterKeys``); ``triton_...`` is reserved too.
RESERVED = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output")
)
#: Headers of the gRPC transport itself (``host`` is how zttp hands over ``:authority``; and every
#: ``grpc-...`` one): grpc's servers leave them out of a call's metadata.
GRPC_TRANSPORT_HEADERS = frozenset(("content-type", "te", "host"))
_CASE_SENSITIVE = "(?-i)"


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` as Triton reads it: case-insensitive, unless it starts with ``(?-i)``."""
    if pattern.startswith(_CASE_SENSITIVE):
        return re.compile(pattern[len(_CASE_SENSITIVE) :])
    return re.compile(pattern, re.IGNORECASE)


def pattern_option(value: str) -> str:
    """argparse ``type`` of the two flags: a pattern that does not compile stops the server at start."""
    try:
        compile_pattern(value)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a regular expression: {exc}") from None
    return value


class HeaderForward:
    """One frontend's forwarding: which names match, which are withheld."""

    __slots__ = ("_search", "_withheld")

    def __init__(self, pattern: str, withheld: Iterable[str] = ()) -> None:
        self._search = compile_pattern(pattern).search
        #: Names never forwarded, matching or not (credentials, transport headers).
        self._withheld = frozenset(withheld)

    def add_text(self, parameters: dict[str, Any], metadata: Iterable[tuple[str, str]]) -> None:
        """Add the matching pairs of a gRPC call's ``metadata`` (lowercase names) to ``parameters``;
        binary ``-bin`` metadata and gRPC's own ``grpc-...`` headers are left out."""
        search = self._search
        for name, value in metadata:
            if search(name) is not None and name not in self._withheld and not _grpc_own(name):
                parameters[_allowed(name)] = value

    def add_raw(self, parameters: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Add the matching headers (lowercase names, raw values: UTF-8, as Triton passes them on)."""
        search = self._search
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1")
            if search(name) is not None and name not in self._withheld:
                parameters[_allowed(name)] = raw_value.decode("utf-8", "replace")


def _grpc_own(name: str) -> bool:
    return name.endswith("-bin") or name.startswith("grpc-")


def _allowed(name: str) -> str:
    if name in RESERVED or name.startswith("triton_"):
        raise InvalidArgument(f"Header '{name}' is reserved for Triton usage and cannot be forwarded.")
    return name
