"""The HTTP/1.1 protocol's own CPU time per request, in process, without sockets.

Drives the protocol class ``inferd.serving.AsgiServer`` serves with, as its server builds it,
through a transport that only collects what is written: one keep-alive connection, one request
per read (a POST with a 64-byte body, ``Content-Length`` framed), each answered before the next is
sent, by a direct route (``direct``: the path infer requests take) or by a null ASGI app that
reads the body and answers (``asgi``: every other request). It prints the process's CPU time per
request (``time.process_time``: a busy machine slows the run but barely moves the number).
``--baseline DIR`` runs the same in another checkout's sources (e.g. main), in turn, round after
round, and prints both medians and their ratio: a before/after that a noisy machine does not drown.

    .venv/bin/python benchmarks/h1_protocol.py --requests 20000 --rounds 6 --baseline /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from protocol_bench import FakeTransport, compare, run_once, summary

BODY = bytes(64)
ANSWER = b"x" * 32
PATHS = {"direct": b"/direct", "asgi": b"/asgi"}


class Collector(FakeTransport):
    """A transport that counts the bytes written."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)

    def writelines(self, data: list[bytes]) -> None:
        self.size += sum(len(part) for part in data)


async def _null_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


class _Routes:
    max_body = 1 << 20

    def handler(self, method: bytes, path: str) -> Any:
        return self._answer if path == "/direct" else None

    async def _answer(self, headers: Any, body: bytes) -> Any:
        from inferd.serving import Reply

        return Reply(200, [(b"content-type", b"application/octet-stream"), (b"content-length", b"32")], [ANSWER])


def _connection_factory(loop: asyncio.AbstractEventLoop) -> Any:
    """A function making one connection's protocol, as this checkout's server builds it."""
    from inferd.serving import AsgiServer

    cls: Any = AsgiServer(_null_app, "127.0.0.1", 0, "bench", direct=_Routes()).protocol()
    try:
        from inferd.serving.runner import ServerState
    except ImportError:  # a checkout served by uvicorn's Server
        import uvicorn
        from uvicorn.server import ServerState  # type: ignore[assignment,no-redef]

        config = uvicorn.Config(
            _null_app,
            http=cls,
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            ws="none",
        )
        config.load()
        state = ServerState()
        return lambda: cls(config=config, server_state=state, app_state={}, _loop=loop)
    state = ServerState()
    return lambda: cls(server_state=state, _loop=loop)


async def _requests(n: int, way: str) -> float:
    """CPU microseconds per request over ``n`` requests answered ``way``."""
    loop = asyncio.get_running_loop()
    make = _connection_factory(loop)
    request = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (PATHS[way], len(BODY), BODY)
    server = make()
    transport = Collector()
    server.connection_made(transport)
    answered = 0
    started = time.process_time()
    for _ in range(n):
        server.data_received(request)
        while transport.size <= answered:
            await asyncio.sleep(0)
        answered = transport.size
    elapsed = time.process_time() - started
    server.connection_lost(None)
    return elapsed / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20000, help="requests per measurement (default 20000)")
    p.add_argument("--rounds", type=int, default=6, help="measurements of each checkout, in turn (default 6)")
    p.add_argument("--baseline", type=Path, default=None, help="another checkout of inferd, measured in turn")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--way", choices=sorted(PATHS), default="direct", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        import uvloop

        print(f"{uvloop.run(_requests(args.one, args.way)):.2f}")
        return
    for way in sorted(PATHS, reverse=True):
        results = compare(
            args.baseline,
            args.rounds,
            lambda checkout, way=way: run_once(__file__, ["--one", str(args.requests), "--way", way], checkout),
        )
        summary(f"CPU time per HTTP/1.1 request ({way}), median of {args.rounds} x {args.requests} requests", results)


if __name__ == "__main__":
    main()
