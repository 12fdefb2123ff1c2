"""``inferd health [URL]``: is a server (inferd or Triton) live and ready, and which models are not
READY; exit codes for scripts and probes.

Exit status: 0 ready (with ``--live``: live), 1 live but not ready, 3 not live or not reachable
(a gRPC port asked over HTTP included), 2 a usage error. HTTP needs only the standard library;
``grpc://host:port`` asks the gRPC port (:mod:`inferd.tools.health_grpc`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

from inferd.tools.probe_headers import request_headers
from inferd.tools.wrong_port import answered_http2, grpc_port

READY, NOT_READY, USAGE, DOWN = 0, 1, 2, 3


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "health",
        help="ask a server whether it is live and ready, and which models are not (exit code for probes)",
        description="Ask a server's HTTP or gRPC port (inferd or Triton) whether it is live and ready, and list its "
        "models' states. Exit status: 0 ready (with --live: live), 1 live but not ready, 3 not live or not "
        "reachable (or the wrong port).",
    )
    p.add_argument(
        "url",
        nargs="?",
        default="localhost:8000",
        help="the HTTP port: host:port, http://host:port or https://host:port; or the gRPC port: grpc://host:port "
        "or grpcs://host:port (default: localhost:8000)",
    )
    p.add_argument("--live", action="store_true", help="only liveness decides the exit status")
    p.add_argument(
        "--api-key",
        default=os.environ.get("INFERD_API_KEY"),
        metavar="KEY",
        help="sent as 'Authorization: Bearer KEY' (default: $INFERD_API_KEY)",
    )
    p.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an extra header, e.g. a restricted API group's (repeatable)",
    )
    p.add_argument("--cacert", default=None, metavar="FILE", help="CA certificates to verify an https server with")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECS", help="per request (default: 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


class _Client:
    def __init__(self, args: argparse.Namespace) -> None:
        url = args.url if "://" in args.url else f"http://{args.url}"
        self.base = url.rstrip("/")
        self.timeout = args.timeout
        self.context = ssl.create_default_context(cafile=args.cacert) if self.base.startswith("https") else None
        self.headers = request_headers(args)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """Status and body; status 0 with the reason when the server cannot be reached."""
        request = urllib.request.Request(self.base + path, body, self.headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            reason = str(getattr(exc, "reason", exc))
            if answered_http2(reason):
                address = self.base.partition("://")[2]
                reason = grpc_port(address, f"ask it with grpc://{address}, or give the HTTP port")
            return 0, reason.encode()


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """What the server says: live, ready, its models (or why they could not be listed)."""
    if args.url.startswith(("grpc://", "grpcs://")):
        from inferd.tools.health_grpc import probe as probe_grpc  # grpcio only when asked

        return probe_grpc(args)
    client = _Client(args)
    live, live_body = client.call("GET", "/v2/health/live")
    result: dict[str, Any] = {"url": client.base, "live": live == 200, "ready": False, "models": None}
    if live != 200:
        result["error"] = live_body.decode(errors="replace") if live == 0 else f"/v2/health/live answered {live}"
        return result
    result["ready"] = client.call("GET", "/v2/health/ready")[0] == 200
    status, body = client.call("POST", "/v2/repository/index", b"{}")
    if status == 200:
        result["models"] = json.loads(body)
    else:
        result["models_error"] = f"{status}: {_error_text(body)}"
    return result


def _error_text(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", body.decode(errors="replace")))
    except (ValueError, AttributeError):
        return body.decode(errors="replace").strip()


def _print(result: dict[str, Any]) -> None:
    print(f"{result['url']}: live {'yes' if result['live'] else 'no'}, ready {'yes' if result['ready'] else 'no'}")
    if "error" in result:
        print(f"  {result['error']}")
    if result.get("models_error"):
        print(f"  models not listed ({result['models_error']})")
    for row in result["models"] or []:
        state = row.get("state", "not loaded")
        reason = f": {row['reason']}" if row.get("reason") else ""
        print(f"  {row['name']} {row.get('version', '-')} {state}{reason}")


def run(args: argparse.Namespace) -> int:
    try:
        result = probe(args)
    except (OSError, ssl.SSLError) as exc:  # a --cacert that cannot be read
        print(f"inferd health: error: {exc}", file=sys.stderr)
        return USAGE
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    if not result["live"]:
        return DOWN
    return READY if result["ready"] or args.live else NOT_READY
