"""Attacks on the gRPC port's HTTP/2 (``--grpc-transport h2``), with raw frames on loopback.

Control-frame floods (SETTINGS, PING, WINDOW_UPDATE; CVE-2019-9512/9515) close the connection
with GOAWAY ENHANCE_YOUR_CALM and keep the server's memory flat, even from a client that never
reads the acknowledgements; rapid reset, CONTINUATION floods and oversized header lists stay
refused; gRPC clients are not mistaken for a flood. Every attack lasts seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.e2e.attack import RSS_GROWTH_MB, non_reader, read_until_closed, rss_mb, send_for
from tests.e2e.h2_client import RawConnection, message
from tests.servers import Servers

LIVE = "/inference.GRPCInferenceService/ServerLive"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ENHANCE_YOUR_CALM = 0xB
SETTINGS, PING, GOAWAY, WINDOW_UPDATE, RST_STREAM, HEADERS, CONTINUATION = 0x4, 0x6, 0x7, 0x8, 0x3, 0x1, 0x9


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def goaway_code(data: bytes) -> int | None:
    """The error code of the last GOAWAY among the frames in ``data`` (None: no GOAWAY)."""
    code, at = None, 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        if data[at + 3] == GOAWAY and at + 9 + length <= len(data):
            code = int.from_bytes(data[at + 13 : at + 17], "big")
        at += 9 + length
    return code


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--grpc-transport", "h2")


def assert_up(server: ServerProcess) -> None:
    conn = RawConnection(server.grpc_port)
    try:
        answer = conn.wait(conn.call(LIVE, message(b"")).stream_id)
    finally:
        conn.close()
    assert answer.trailers.get(b"grpc-status") == b"0", answer


FLOODS = {
    "SETTINGS": h2_frame(SETTINGS, 0, 0),
    "PING": h2_frame(PING, 0, 0, b"12345678"),
}


@pytest.mark.parametrize("kind", list(FLOODS))
def test_a_control_frame_flood_from_a_client_that_never_reads_is_cut_off(server, kind):
    """Every SETTINGS and PING is acknowledged; the old server buffered every acknowledgement
    for a client that reads none (hundreds of MB in seconds)."""
    before = rss_mb(server)
    sock = non_reader(server.grpc_port)
    try:
        sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0))
        sent = send_for(sock, FLOODS[kind] * 4096, seconds=4.0)
        grown = rss_mb(server) - before
        _data, closed = read_until_closed(sock, 10.0)
    finally:
        sock.close()
    assert grown < RSS_GROWTH_MB, f"RSS grew {grown:.0f} MB after a {sent / 1e6:.0f} MB {kind} flood"
    assert closed, f"the connection stayed open through a {sent / 1e6:.0f} MB {kind} flood"
    assert_up(server)


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(h2_frame(SETTINGS, 0, 0), id="SETTINGS"),
        pytest.param(h2_frame(PING, 0, 0, b"12345678"), id="PING"),
        pytest.param(h2_frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big")), id="WINDOW_UPDATE"),
    ],
)
def test_a_control_frame_flood_gets_goaway_enhance_your_calm(server, flood):
    """From a client that reads: the GOAWAY comes after the acknowledgements of what was allowed."""
    with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
        sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0))
        received = b""
        done = False
        chunk = flood * 1000
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                sock.sendall(chunk)
            data, done = read_until_closed(sock, 0.05)
            received += data
        rest, done = read_until_closed(sock, 5.0)
        received += rest
    assert done
    assert goaway_code(received) == ENHANCE_YOUR_CALM


def test_rapid_reset_is_cut_off_and_the_server_stays_up(server):
    """Streams opened and reset at once (CVE-2023-44487), far more than a connection may open."""
    before = rss_mb(server)
    conn = RawConnection(server.grpc_port)
    try:
        try:
            for _ in range(10_000):
                stream = conn.call(LIVE, message(b""), end=False)
                stream.reset(0x8)  # CANCEL
                conn.flush()
        except OSError:  # the server closed the connection
            pass
        _data, closed = read_until_closed(conn.sock, 10.0)
    finally:
        conn.close()
    assert closed
    assert rss_mb(server) - before < RSS_GROWTH_MB
    assert_up(server)


def test_a_continuation_flood_is_cut_off(server):
    """One HEADERS frame without END_HEADERS, then CONTINUATION frames without end."""
    before = rss_mb(server)
    with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
        sock.sendall(PREFACE + h2_frame(SETTINGS, 0, 0) + h2_frame(HEADERS, 0x0, 1, b"\x82\x84"))
        send_for(sock, h2_frame(CONTINUATION, 0, 1, b"\x40\x01a\x01b" * 2000) * 16, seconds=3.0)
        _data, closed = read_until_closed(sock, 10.0)
    assert closed
    assert rss_mb(server) - before < RSS_GROWTH_MB
    assert_up(server)


def test_a_header_list_over_64k_is_refused(server):
    """zttp advertises SETTINGS_MAX_HEADER_LIST_SIZE 65536 and holds to it."""
    conn = RawConnection(server.grpc_port)
    try:
        conn.call(LIVE, message(b""), headers=[(b"content-type", b"application/grpc"), (b"x-big", b"a" * 100_000)])
        answer = conn.wait(1)
    finally:
        conn.close()
    assert conn.closed and not answer.trailers
    assert_up(server)


def test_grpc_clients_are_not_taken_for_a_flood(server):
    """Thousands of calls on one channel (gRPC's own pings and window updates included) all succeed."""

    async def run() -> list[bool]:
        async with grpc.aio.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

            async def worker() -> list[bool]:
                return [(await stub.ServerLive(service_pb2.ServerLiveRequest())).live for _ in range(100)]

            batches = await asyncio.gather(*(worker() for _ in range(30)))
            return [live for batch in batches for live in batch]

    assert all(asyncio.run(run()))
