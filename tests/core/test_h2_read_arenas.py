"""inferd's HTTP/2 connections read the socket into reused memory (``inferd.serving.h2``'s
``get_buffer``: the server's scratch buffer, and read arenas while a call receives large DATA),
over real sockets, in process: bodies read into an arena arrive intact, a body a call keeps after
its answer is never written over by later reads, and connections without calls hold no arena."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import numpy as np

from inferd.serving import H2Server, UnaryStream, run
from inferd.serving.h2_receive import POOLED_FROM
from tests.e2e.h2_client import GRPC_HEADERS, RawConnection, message

KEPT: list[bytes | memoryview] = []
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


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


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


def _frame_starts(data: bytes) -> list[int]:
    starts, at = [], 0
    while at + 9 <= len(data):
        starts.append(at)
        at += 9 + int.from_bytes(data[at : at + 3], "big")
    return starts


def _headers_block(path: bytes) -> bytes:
    """POST ``path`` with gRPC's headers, as HPACK literals without indexing (all names under 127 bytes)."""
    out = b"\x83\x86"  # :method POST, :scheme http
    for name, value in [(b":path", path), (b":authority", b"inferd"), (b"content-type", b"application/grpc")]:
        out += b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
    return out


def test_large_messages_in_4_mib_frames_are_read_straight_into_their_buffers_and_end() -> None:
    """A gRPC client's way: messages of 9 MiB and 6 MiB + 3 bytes in DATA frames of 4 MiB (the
    size the server advertises), END_STREAM on the last frame, two calls open at once on one
    connection and a small one between the first one's frames: once a call's body buffer exists the rest of each payload is read into
    it in place; every call ends (the last frame's END_STREAM, in such a read, is seen) and keeps
    what was sent."""
    KEPT.clear()
    rng = np.random.default_rng(9)
    messages = {1: message(rng.bytes(9 << 20)), 3: message(rng.bytes((6 << 20) + 3)), 5: message(b"small")}

    def scenario(server: H2Server) -> dict[int, bytes]:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        try:
            settings = _frame(0x4, 0, 0, (4).to_bytes(2, "big") + (1 << 30).to_bytes(4, "big"))
            sock.sendall(PREFACE + settings + _frame(0x8, 0, 0, (1 << 30).to_bytes(4, "big")))
            time.sleep(0.2)  # the server's preface (two SETTINGS: zttp's, then the windows), acked
            preface = sock.recv(1 << 16)  # now, so that nothing the client sends later wakes the server
            acks = sum(1 for at in _frame_starts(preface) if preface[at + 3] == 0x4 and not preface[at + 4] & 1)
            sock.sendall(_frame(0x4, 0x1, 0) * acks)
            step = 4 << 20
            wire = [_frame(0x1, 0x4, 1, _headers_block(b"/keep")), _frame(0x1, 0x4, 3, _headers_block(b"/keep"))]
            for stream_id in (1, 3):
                body = messages[stream_id]
                wire += [
                    _frame(0x0, int(at + step >= len(body)), stream_id, body[at : at + step])
                    for at in range(0, len(body), step)
                ]
            wire[3:3] = [_frame(0x1, 0x4, 5, _headers_block(b"/keep")), _frame(0x0, 0x1, 5, messages[5])]
            data = b"".join(wire)
            sock.sendall(data[:-100_000])
            time.sleep(0.3)  # the last call's buffer is ready: its last bytes are read straight into it
            sock.sendall(data[-100_000:])
            answers: dict[int, bytes] = {}
            buffer = b""
            while len(answers) < 3:
                data = sock.recv(1 << 16)
                assert data, "the server closed the connection"
                buffer += data
                while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                    length = int.from_bytes(buffer[:3], "big")
                    kind, flags, sid = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
                    if kind == 0x0:
                        answers[sid] = buffer[9 : 9 + length]
                    assert kind != 0x4 or flags & 1, "the server sent more SETTINGS"
                    buffer = buffer[9 + length :]
            return answers
        finally:
            sock.close()

    answers = _serve(scenario)
    assert answers == {sid: b"%d" % len(body) for sid, body in messages.items()}
    assert sorted(bytes(body) for body in KEPT) == sorted(messages.values())
    KEPT.clear()
