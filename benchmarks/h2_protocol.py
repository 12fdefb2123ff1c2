"""The HTTP/2 protocol's own CPU time per gRPC unary call, in process, without sockets.

Drives ``inferd.serving.h2``'s protocol class as inferd's server (``serving.runner``) builds it, through a
transport that only collects what is written, with a zttp client sending one call at a time (a
message of 64 bytes; a route that answers at once through the unary short path, as
``h2load -m1 -c1`` against a plain ModelInfer would, minus the model), connections rotated as the
server rotates them. It prints the process's CPU time per call (``time.process_time``: a busy
machine slows the run but barely moves the number). ``--baseline DIR`` runs the same in another
checkout's sources (e.g. the commit before a change to ``serving/``), in turn, round after round,
and prints both medians: a before/after that a noisy machine does not drown.

    .venv/bin/python benchmarks/h2_protocol.py --calls 20000 --rounds 10 --baseline /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from protocol_bench import FakeTransport, compare, run_once, summary

HEADERS = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]
MESSAGE = b"\0\0\0\0\x40" + bytes(64)
#: Calls per connection: under the server's rotation (4000), so no connection is rotated mid-run.
PER_CONNECTION = 3000


class Collector(FakeTransport):
    """A transport that keeps what is written, for the client to read."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))
        self.wrote.set()

    def writelines(self, data: list[bytes]) -> None:
        self.out.extend(bytes(part) for part in data)
        self.wrote.set()

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data


async def _calls(n: int) -> float:
    """CPU microseconds per call over ``n`` calls."""
    import zttp

    from inferd.serving import h2

    # a checkout whose UnaryStream takes the answer's body as parts (h2_send) or as bytes (before it)
    body: Any = [MESSAGE] if hasattr(h2.UnaryStream, "take") else MESSAGE
    try:
        from inferd.serving.runner import ServerState
    except ImportError:  # a checkout whose server is uvicorn's
        from uvicorn.server import ServerState  # type: ignore[assignment,no-redef]

    async def handler(stream: Any) -> None:
        await stream.read_body(lambda chunks, size: size + len(chunks[-1]))
        await stream.answer([(b"content-type", b"application/grpc")], body, [(b"grpc-status", b"0")])

    routes = {b"/x": lambda method, headers: handler}
    try:
        protocol = h2.protocol_class(None, routes, 7200)  # type: ignore[arg-type]
    except TypeError:  # a checkout whose protocol_class takes only the routes
        protocol = h2.protocol_class(routes)  # type: ignore[call-arg]
    state = ServerState()
    loop = asyncio.get_running_loop()
    started, done = time.process_time(), 0
    while done < n:
        server = protocol(server_state=state, _loop=loop)  # type: ignore[call-arg]
        transport = Collector()
        server.connection_made(transport)  # type: ignore[arg-type]
        client = zttp.Connection(zttp.CLIENT, zttp.HTTP2)
        client.initiate_connection()
        await asyncio.sleep(0)
        client.receive_data(transport.take())
        _events(client)
        for _ in range(min(PER_CONNECTION, n - done)):
            stream = client.send_request(b"POST", b"/x", b"localhost", HEADERS)
            stream.send_data(MESSAGE)
            stream.end_message()
            server.data_received(client.data_to_send())
            while True:
                await transport.wrote.wait()
                transport.wrote.clear()
                client.receive_data(transport.take())
                if any(type(event) is zttp.EndOfMessage for event in _events(client)):
                    break
            done += 1
        server.connection_lost(None)
    return (time.process_time() - started) / n * 1e6


def _events(conn: Any) -> list[Any]:
    import zttp

    events = []
    while type(event := conn.next_event()) is not zttp.NeedData:
        events.append(event)
    return events


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=20000, help="calls per measurement (default 20000)")
    p.add_argument("--rounds", type=int, default=6, help="measurements of each checkout, in turn (default 6)")
    p.add_argument("--baseline", type=Path, default=None, help="another checkout of inferd, measured in turn")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        import uvloop

        print(f"{uvloop.run(_calls(args.one)):.2f}")
        return
    results = compare(
        args.baseline, args.rounds, lambda checkout: run_once(__file__, ["--one", str(args.calls)], checkout)
    )
    summary(
        f"CPU time per gRPC unary call in the HTTP/2 protocol, median of {args.rounds} x {args.calls} calls", results
    )


if __name__ == "__main__":
    main()
