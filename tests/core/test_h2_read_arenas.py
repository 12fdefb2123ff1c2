"""inferd's HTTP/2 connections read the socket into reused memory (``inferd.serving.h2``'s
``get_buffer``: the server's scratch buffer, and read arenas while a call receives large DATA),
over real sockets, in process: bodies read into an arena arrive intact, a body a call keeps after
its answer is never written over by later reads, and connections without calls hold no arena."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from inferd.serving import H2Server, UnaryStream, run
from inferd.serving.h2_receive import POOLED_FROM
from tests.e2e.h2_client import GRPC_HEADERS, RawConnection, message

KEPT: list[bytes | memoryview] = []


def _message_size(chunks: list[Any], size: int) -> int | None:
    """The body's size a one-message gRPC call sends, once its length prefix is in."""
    if size < 5:
        return None
    head = b"".join(bytes(chunk) for chunk in chunks)[:5]
    return 5 + int.from_bytes(head[1:5], "big")


async def _keep(stream: UnaryStream) -> None:
    """Keeps the body (as a model that holds on to its input would) and answers its length."""
    body = await stream.read_body(_message_size)
    if body is not None:
        KEPT.append(body)
        await stream.answer([(b"content-type", b"application/grpc")], [b"%d" % len(body)], [(b"grpc-status", b"0")])


def _serve(scenario: Any) -> Any:
    async def main() -> Any:
        server = H2Server(object(), "127.0.0.1", 0, "test h2", unary={b"/keep": lambda method, headers: _keep})
        await server.start()
        try:
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(loop.run_in_executor(None, scenario, server), 120)
        finally:
            await server.stop(2.0)

    return run(main())


def test_bodies_read_into_arenas_arrive_intact_and_kept_bodies_are_never_written_over() -> None:
    """Three connections at once, each sending large bodies (read into arenas, copied part by part
    into pooled buffers; a few MiB, more than an arena) and small ones (the scratch buffer) in
    turn: every body the calls kept is, at the end, byte for byte what its client sent; a
    connection that is open but has no call holds no arena, and every arena is free again."""
    KEPT.clear()
    rng = np.random.default_rng(42)
    sizes = [3 << 20, 1000, POOLED_FROM + 12_345, 20_000, (5 << 20) + 7]
    bodies = {(client, i): message(rng.bytes(size)) for client in range(3) for i, size in enumerate(sizes)}
    errors: list[str] = []

    def scenario(server: H2Server) -> dict[str, int]:
        def client(number: int) -> None:
            conn = RawConnection(server.port)
            conn.sock.settimeout(60)
            try:
                for i in range(len(sizes)):
                    body = bodies[(number, i)]
                    answer = conn.wait(conn.call("/keep", body, GRPC_HEADERS).stream_id)
                    if answer.body != b"%d" % len(body):
                        errors.append(f"client {number} call {i}: answered {answer.body[:40]!r}")
            finally:
                conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        idle = RawConnection(server.port)  # a connection with no call: it holds no arena
        try:
            assert idle.wait(idle.call("/keep", message(b"x" * 30_000)).stream_id).body == b"30005"
            connections = server.connections()
            arenas = type(connections[0]).served.arenas
            return {
                "arenas": len(arenas),
                "free": arenas.free(),
                "holding": sum(c._arena is not None for c in connections),
            }
        finally:
            idle.close()

    state = _serve(scenario)
    assert not errors
    sent = sorted(bytes(body) for body in bodies.values())
    sent.append(message(b"x" * 30_000))
    assert sorted(bytes(body) for body in KEPT) == sorted(sent)
    assert state["arenas"] >= 1  # large bodies were read into arenas
    assert state["holding"] == 0
    assert state["free"] == state["arenas"]
    KEPT.clear()
