"""Frames over HTTP/2's 16 KiB: inferd's HTTP/2 protocol advertises SETTINGS_MAX_FRAME_SIZE 4 MiB
(as gRPC clients and Triton do), cuts large DATA out itself, and gives zttp (which takes no frame
over 16 KiB) the rest re-framed: a header block in CONTINUATION frames, padded DATA without its
padding. Over real sockets, in process, against a unary echo route."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import numpy as np

from inferd.serving import H2Server, UnaryStream, run
from inferd.serving.h2_send import RECEIVE_MAX_FRAME, frame_header

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return frame_header(len(payload), kind, flags, stream_id) + payload


def _integer(value: int, prefix_bits: int) -> bytes:
    """An HPACK integer with a ``prefix_bits`` prefix (RFC 7541 5.1), flags clear."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = bytearray([limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _block(path: bytes, extra: list[tuple[bytes, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    """A header block: POST, http, ``path``, gRPC's headers, ``extra``, as literals without indexing."""
    fields = [
        (b":path", path),
        (b":authority", b"inferd"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    out = b"\x83\x86"  # :method POST, :scheme http (static table)
    for name, value in [*fields, *extra]:
        out += b"\x00" + _integer(len(name), 7) + name + _integer(len(value), 7) + value
    return out


async def _echo(stream: UnaryStream) -> None:
    body = await stream.read_body(lambda chunks, size: None)
    if body is not None:
        await stream.answer(
            [(b"content-type", b"application/grpc")], [b"%d:" % len(body), body[:64]], [(b"grpc-status", b"0")]
        )


class Client:
    """A raw HTTP/2 connection that reads frames; its windows are wide (4 MiB frames, 1 GiB)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""
        settings = frame_header(12, 0x4, 0, 0) + (4).to_bytes(2, "big") + (1 << 30).to_bytes(4, "big")
        settings += (5).to_bytes(2, "big") + (4 << 20).to_bytes(4, "big")
        self.sock.sendall(PREFACE + settings + _frame(0x8, 0, 0, (1 << 30).to_bytes(4, "big")))
        self.server_settings: dict[int, int] = {}

    def read_frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    head, payload = self.buffer[:9], self.buffer[9 : 9 + length]
                    self.buffer = self.buffer[9 + length :]
                    kind, flags, sid = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                    if kind == 0x4 and not flags & 1:
                        for i in range(0, len(payload), 6):
                            self.server_settings[int.from_bytes(payload[i : i + 2], "big")] = int.from_bytes(
                                payload[i + 2 : i + 6], "big"
                            )
                        self.sock.sendall(_frame(0x4, 0x1, 0))
                    return kind, flags, sid, payload
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                data = b""
            if not data:
                return -1, 0, 0, b""
            self.buffer += data

    def answer(self, stream_id: int) -> tuple[bytes, bool]:
        """The DATA of ``stream_id`` until its trailers; True when the connection got GOAWAY or closed first."""
        body = b""
        while True:
            kind, flags, sid, payload = self.read_frame()
            if kind in (-1, 0x7):
                return body, True
            if sid == stream_id and kind == 0x0:
                body += payload
            elif sid == stream_id and kind == 0x1 and flags & 0x1:
                return body, False
            elif sid == stream_id and kind == 0x3:
                return body, True

    def close(self) -> None:
        self.sock.close()


def _serve(scenario: Any) -> Any:
    async def main() -> Any:
        server = H2Server(object(), "127.0.0.1", 0, "test h2", unary={b"/unary": lambda method, headers: _echo})
        await server.start()
        try:
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(loop.run_in_executor(None, scenario, server.port), 60)
        finally:
            await server.stop(2.0)

    return run(main())


def test_large_frames_are_taken_up_to_the_advertised_4_mib() -> None:
    """A 10 MiB body in DATA frames of 4 MiB; a 40 KB header block in one HEADERS frame (padded,
    with PRIORITY) and in a HEADERS and an over-16-KiB CONTINUATION; a padded 100 KB DATA frame; a
    frame of an unknown type over 16 KiB (ignored): every call is answered with the body it sent,
    on one connection. A DATA frame over 4 MiB then closes the connection (FRAME_SIZE_ERROR)."""
    body = np.random.default_rng(3).bytes(10 << 20)
    big = [(b"x-big", b"v" * 40_000)]

    def scenario(port: int) -> dict[str, Any]:
        client = Client(port)
        try:
            got: dict[str, Any] = {}
            # 1: 4 MiB DATA frames
            step = 4 << 20
            frames = [_frame(0x1, 0x4, 1, _block(b"/unary"))]
            frames += [
                _frame(0x0, 0x1 if at + step >= len(body) else 0, 1, body[at : at + step])
                for at in range(0, len(body), step)
            ]
            client.sock.sendall(b"".join(frames))
            got["data"] = client.answer(1)
            # 2: one padded HEADERS frame with PRIORITY, 40 KB
            block = _block(b"/unary", big)
            padded = bytes([7]) + bytes(5) + block + bytes(7)  # pad length, priority fields, block, padding
            client.sock.sendall(_frame(0x1, 0x4 | 0x8 | 0x20, 3, padded) + _frame(0x0, 0x1, 3, b"headers"))
            got["headers"] = client.answer(3)
            # 3: HEADERS, then the rest of the block in a CONTINUATION over 16 KiB
            client.sock.sendall(
                _frame(0x1, 0, 5, block[:1000]) + _frame(0x9, 0x4, 5, block[1000:]) + _frame(0x0, 0x1, 5, b"cont")
            )
            got["continuation"] = client.answer(5)
            # 4: a padded DATA frame of 100 KB, after an unknown frame type of 20 KB
            payload = body[:100_000]
            client.sock.sendall(
                _frame(0xEE, 0, 0, bytes(20_000))
                + _frame(0x1, 0x4, 7, _block(b"/unary"))
                + _frame(0x0, 0x1 | 0x8, 7, bytes([200]) + payload + bytes(200))
            )
            got["padded"] = client.answer(7)
            got["max_frame"] = client.server_settings.get(0x5)
            # 5: over the advertised size
            try:  # the server may close the connection while the frame is still being sent
                client.sock.sendall(_frame(0x1, 0x4, 9, _block(b"/unary")) + _frame(0x0, 0x1, 9, bytes((4 << 20) + 1)))
                got["oversized"] = client.answer(9)
            except (BrokenPipeError, ConnectionResetError):
                got["oversized"] = (b"", True)
            return got
        finally:
            client.close()

    got = _serve(scenario)
    assert got["max_frame"] == RECEIVE_MAX_FRAME == 4 << 20
    assert got["data"] == (b"%d:" % len(body) + body[:64], False)
    assert got["headers"] == (b"7:headers", False)
    assert got["continuation"] == (b"4:cont", False)
    assert got["padded"] == (b"100000:" + body[:64], False)
    assert got["oversized"][1]  # the connection went away (GOAWAY FRAME_SIZE_ERROR)
