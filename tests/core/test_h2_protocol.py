"""inferd's own HTTP/2 protocol (``inferd.serving.h2``) over real sockets, in process: the ASGI path
(answers, trailers, an app's failure), a stream whose client grants no window (what the gRPC
reply's stall bound relies on), the idle timer, graceful shutdown, and the response DATA inferd
frames itself under the client's flow-control windows (``inferd.serving.h2_send``)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
import zttp

from inferd.serving import H2Server, UnaryStream, run
from inferd.serving.h2_send import RECEIVE_CONNECTION_WINDOW, RECEIVE_STREAM_WINDOW, DataSender
from tests.e2e.h2_client import GRPC_HEADERS, Answer, RawConnection

CHUNK = bytes(1 << 16)


class App:
    """An ASGI app by path: ``/echo`` (the body back, trailers), ``/boom`` (fails), ``/park`` (writes
    what the client's window does not take, then resets), ``/slow`` (waits for ``release``)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: dict[str, Any] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/boom":
            raise RuntimeError("boom")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/slow":
            self.seen["slow"] = True
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"application/grpc"), (b"connection", b"close")]})  # fmt: skip
        if path == "/park":
            stream = send.__self__  # what inferd's gRPC reply looks at
            for _ in range(20):
                await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            self.seen["parked"] = stream.pending_bytes
            stream.abort_stream()
            self.seen["disconnected"] = stream.disconnected
            return
        await send({"type": "http.response.body", "body": body, "more_body": False})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False})


def _serve(scenario: Callable[[H2Server, App], Awaitable[Any]], keep_alive_secs: float = 75.0) -> Any:
    async def main() -> Any:
        app = App()
        server = H2Server(app, "127.0.0.1", 0, "test h2", keep_alive_secs=keep_alive_secs)
        await server.start()
        try:
            return await scenario(server, app)
        finally:
            app.release.set()
            await server.stop(2.0)

    return run(main())


async def _call(port: int, path: str, body: bytes = b"x", headers: list[tuple[bytes, bytes]] = GRPC_HEADERS) -> Answer:
    def call() -> Answer:
        client = RawConnection(port)
        try:
            return client.wait(client.call(path, body, headers).stream_id)
        finally:
            client.close()

    return await asyncio.get_running_loop().run_in_executor(None, call)


def test_asgi_answers_trailers_only_to_clients_that_take_them_and_a_failed_app_gets_500() -> None:
    async def scenario(server: H2Server, app: App) -> list[Answer]:
        no_te = [(b"content-type", b"application/grpc")]
        return [await _call(server.port, "/echo", b"hello"), await _call(server.port, "/echo", b"hi", no_te),
                await _call(server.port, "/boom")]  # fmt: skip

    echo, no_te, boom = _serve(scenario)
    assert (echo.status, echo.body, echo.trailers) == (200, b"hello", {b"grpc-status": b"0"})
    assert b"connection" not in echo.headers  # forbidden in HTTP/2: dropped
    assert (no_te.status, no_te.body, no_te.trailers) == (200, b"hi", {})
    assert (boom.status, boom.body) == (500, b"Internal Server Error")


def test_a_stream_whose_client_grants_no_window_parks_its_bytes_and_is_reset() -> None:
    """What the gRPC reply's stall bound uses: ``send.__self__.pending_bytes`` and ``abort_stream``."""

    async def scenario(server: H2Server, app: App) -> tuple[Answer, dict[str, Any]]:
        return await _call(server.port, "/park"), app.seen

    parked, seen = _serve(scenario)
    assert parked.reset and len(parked.body) <= 65_535  # the client's initial window, no more
    assert seen["parked"] >= 20 * len(CHUNK) - 65_535 and seen["disconnected"]


def test_an_idle_connection_is_closed_after_keep_alive_but_not_while_a_call_runs() -> None:
    async def scenario(server: H2Server, app: App) -> tuple[bool, Answer, bool]:
        loop = asyncio.get_running_loop()
        client = RawConnection(server.port)
        slow = client.call("/slow", b"x")
        await asyncio.sleep(1.5)  # three keep-alive periods with a call in flight
        open_while_busy = len(server.connections()) == 1
        app.release.set()
        answer = await loop.run_in_executor(None, client.wait, slow.stream_id)
        deadline = time.monotonic() + 20
        while server.connections() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        closed = not server.connections()
        client.close()
        return open_while_busy, answer, closed

    open_while_busy, answer, closed = _serve(scenario, keep_alive_secs=0.5)
    assert open_while_busy and answer.status == 200 and answer.trailers == {b"grpc-status": b"0"}
    assert closed, "an idle connection outlived its keep-alive"


def test_shutdown_finishes_calls_in_flight_and_refuses_new_streams() -> None:
    async def scenario(server: H2Server, app: App) -> tuple[Answer, Answer, bool]:
        loop = asyncio.get_running_loop()
        client = RawConnection(server.port)
        slow = client.call("/slow", b"x")
        while "slow" not in app.seen:
            await asyncio.sleep(0.01)
        stopping = loop.create_task(server.stop(10.0))
        await asyncio.sleep(0.2)
        late = client.call("/echo", b"late")
        late_answer = await loop.run_in_executor(None, client.wait, late.stream_id)
        app.release.set()
        answer = await loop.run_in_executor(None, client.wait, slow.stream_id)
        await stopping
        closed = await loop.run_in_executor(None, client.wait, 1 << 30)  # reads until the server closes
        client.close()
        return late_answer, answer, closed.status == 0 and client.closed

    late, answer, closed = _serve(scenario)
    assert (late.status, late.body) == (503, b"Service Unavailable")
    assert (answer.status, answer.body, answer.trailers) == (200, b"x", {b"grpc-status": b"0"})
    assert closed


# -- response DATA under the client's flow control (inferd.serving.h2_send) ------------------------


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def _settings(*pairs: tuple[int, int]) -> bytes:
    return _frame(0x4, 0, 0, b"".join(key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in pairs))


def _window_update(stream_id: int, increment: int) -> bytes:
    return _frame(0x8, 0, stream_id, increment.to_bytes(4, "big"))


class FrameClient:
    """An HTTP/2 client that reads the server's frames itself (to see each DATA frame and grant
    windows by hand); its request HEADERS come from zttp's client, its DATA frames are its own."""

    def __init__(self, port: int, *settings: tuple[int, int]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.zttp = zttp.Connection(zttp.CLIENT, protocol=zttp.HTTP2)
        self.zttp.initiate_connection()
        self.sock.sendall(self.zttp.data_to_send() + _settings(*settings))
        self._buffer = b""
        #: Every frame read: (type, flags, stream id, payload).
        self.frames: list[tuple[int, int, int, bytes]] = []
        self._pings = 0

    def request(self, path: bytes, body: bytes, frame_size: int = 16_384) -> int:
        """HEADERS (through zttp), then ``body`` in DATA frames of ``frame_size``, the last one END_STREAM."""
        stream = self.zttp.send_request(b"POST", path, b"2", [(b"host", b"inferd"), *GRPC_HEADERS])
        data = [body[i : i + frame_size] for i in range(0, len(body), frame_size)] or [b""]
        frames = [_frame(0x0, 0x1 if i == len(data) - 1 else 0, stream.stream_id, part) for i, part in enumerate(data)]
        self.sock.sendall(self.zttp.data_to_send() + b"".join(frames))
        return stream.stream_id

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if len(self._buffer) >= 9:
                length = int.from_bytes(self._buffer[:3], "big")
                if len(self._buffer) >= 9 + length:
                    head, self._buffer = self._buffer[: 9 + length], self._buffer[9 + length :]
                    frame = (head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, head[9:])
                    self.frames.append(frame)
                    return frame
            data = self.sock.recv(1 << 20)
            assert data, "the server closed the connection"
            self._buffer += data

    def data(self, stream_id: int) -> bytes:
        return b"".join(p for kind, _, sid, p in self.frames if kind == 0x0 and sid == stream_id)

    def settle(self) -> None:
        """Read until the server answers a PING: what it would send without more window is in by then."""
        self._pings += 1
        token = self._pings.to_bytes(8, "big")
        self.send(_frame(0x6, 0, 0, token))
        while self.read_frame() != (0x6, 0x1, 0, token):
            pass

    def read_until(self, stream_id: int, size: int) -> None:
        while len(self.data(stream_id)) < size:
            self.read_frame()

    def ended(self, stream_id: int) -> bool:
        return any(kind == 0x1 and flags & 0x1 and sid == stream_id for kind, flags, sid, _ in self.frames)

    def close(self) -> None:
        self.sock.close()


async def _unary_echo(stream: UnaryStream) -> None:
    body = await stream.read_body(lambda chunks, size: None)
    if body is not None:
        await stream.answer([(b"content-type", b"application/grpc")], [body], [(b"grpc-status", b"0")])


UNARY = {b"/unary": lambda method, headers: _unary_echo}


def _serve_raw(scenario: Callable[[int], Any]) -> Any:
    """``scenario(port)`` in a thread, against a server with the ASGI app and the unary ``/unary`` route."""

    async def main() -> Any:
        server = H2Server(App(), "127.0.0.1", 0, "test h2", unary=UNARY)
        await server.start()
        try:
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, scenario, server.port), 60)
        finally:
            await server.stop(2.0)

    return run(main())


@pytest.mark.parametrize("path", [b"/echo", b"/unary"])
def test_answers_keep_to_the_clients_windows_and_frame_size(path: bytes) -> None:
    """A 100,000-byte answer to a client whose stream window is 1,000 bytes, then 1,500 (a
    WINDOW_UPDATE), then 1 MiB (SETTINGS_INITIAL_WINDOW_SIZE moves open streams, RFC 9113 6.9.2),
    under a 65,535-byte connection window until the connection's WINDOW_UPDATE: the server sends
    exactly what each window admits, in frames no larger than 16 KiB, the trailers last."""
    body = bytes(range(256)) * 390 + b"0123456789" * 16  # 100,000 bytes

    def scenario(port: int) -> list[int]:
        client = FrameClient(port, (0x4, 1_000))
        try:
            stream_id = client.request(path, body)
            sent = []
            client.read_until(stream_id, 1_000)
            client.settle()
            sent.append(len(client.data(stream_id)))
            client.send(_window_update(stream_id, 500))
            client.settle()
            sent.append(len(client.data(stream_id)))
            client.send(_settings((0x4, 1 << 20)))
            client.settle()
            sent.append(len(client.data(stream_id)))
            client.send(_window_update(0, 1 << 20))
            while not client.ended(stream_id):
                client.read_frame()
            assert client.data(stream_id) == body
            sizes = [len(p) for kind, _, sid, p in client.frames if kind == 0x0 and sid == stream_id]
            assert max(sizes) <= 16_384
            last = max(i for i, (kind, _, sid, _) in enumerate(client.frames) if kind == 0x0 and sid == stream_id)
            trailers = next(i for i, (kind, flags, sid, _) in enumerate(client.frames) if kind == 0x1 and flags & 1)
            assert trailers > last
            return sent
        finally:
            client.close()

    assert _serve_raw(scenario) == [1_000, 1_500, 65_535]


def test_the_server_opens_wide_receive_windows_and_frames_up_to_the_clients_max_frame_size() -> None:
    """The server's preface widens what a client may send before a WINDOW_UPDATE (SETTINGS_INITIAL_WINDOW_SIZE,
    and the connection's window by WINDOW_UPDATE); a client that takes 1 MiB frames gets them."""

    def scenario(port: int) -> tuple[dict[int, int], int, list[int]]:
        client = FrameClient(port, (0x4, 4 << 20), (0x5, 1 << 20))
        try:
            client.send(_window_update(0, 4 << 20))
            settings: dict[int, int] = {}
            connection_window = 0
            stream_id = client.request(b"/unary", bytes(3 << 20))
            while not client.ended(stream_id):
                kind, flags, sid, payload = client.read_frame()
                if kind == 0x4 and not flags & 1:
                    settings.update(
                        (int.from_bytes(payload[i : i + 2], "big"), int.from_bytes(payload[i + 2 : i + 6], "big"))
                        for i in range(0, len(payload), 6)
                    )
                elif kind == 0x8 and sid == 0 and not connection_window:
                    connection_window = 65_535 + int.from_bytes(payload, "big")
            sizes = [len(p) for kind, _, sid, p in client.frames if kind == 0x0 and sid == stream_id]
            return settings, connection_window, sizes
        finally:
            client.close()

    settings, connection_window, sizes = _serve_raw(scenario)
    assert settings[0x4] == RECEIVE_STREAM_WINDOW >= 4 << 20
    assert connection_window == RECEIVE_CONNECTION_WINDOW >= 16 << 20
    assert sizes == [1 << 20] * 3


@pytest.mark.parametrize("path", [b"/echo", b"/unary"])
def test_a_request_sent_whole_gets_an_answer_larger_than_the_clients_window(path: bytes) -> None:
    """2 MiB sent at once (the server's windows allow it) ends the request with its body over the
    high-water mark: the server must still read the client's WINDOW_UPDATEs for the 2 MiB answer,
    which the client's 64 KiB default window holds back (the server once stopped reading there)."""
    body = np.random.default_rng(5).bytes(2 << 20)

    def scenario(port: int) -> bytes:
        client = FrameClient(port)
        try:
            stream_id = client.request(path, body)
            while not client.ended(stream_id):
                kind, _, sid, payload = client.read_frame()
                if kind == 0x0 and payload:  # give back what was read, as a client reading the answer does
                    client.send(_window_update(0, len(payload)) + _window_update(sid, len(payload)))
            return client.data(stream_id)
        finally:
            client.close()

    assert _serve_raw(scenario) == body


@pytest.mark.parametrize("path", [b"/echo", b"/unary"])
def test_a_body_of_plain_padded_and_empty_data_frames_sent_in_small_pieces_arrives_whole(path: bytes) -> None:
    """Request DATA that inferd cuts out of the byte stream itself (plain frames) and DATA that zttp
    parses (a padded frame), with empty frames between, the bytes sent a few at a time: the call
    reads the body whole and in order, and the connection serves a second call after it."""
    body = np.random.default_rng(7).bytes(50_000)  # the answer fits the client's 64 KiB windows

    def scenario(port: int) -> list[bytes]:
        client = FrameClient(port)
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            answers = []
            for _ in range(2):
                stream = client.zttp.send_request(b"POST", path, b"2", [(b"host", b"inferd"), *GRPC_HEADERS])
                padded = b"\x05" + body[20_000:30_000] + bytes(5)
                frames = [_frame(0x0, 0, stream.stream_id, body[:20_000][i : i + 10_000]) for i in (0, 10_000)]
                frames += [_frame(0x0, 0, stream.stream_id), _frame(0x0, 0x8, stream.stream_id, padded)]
                rest = [body[30_000:46_384], body[46_384:]]
                frames += [_frame(0x0, 0, stream.stream_id, part) for part in rest]
                frames.append(_frame(0x0, 0x1, stream.stream_id))
                wire = client.zttp.data_to_send() + b"".join(frames)
                for i in range(0, len(wire), 7_001):
                    client.send(wire[i : i + 7_001])
                while not client.ended(stream.stream_id):
                    client.read_frame()
                answers.append(client.data(stream.stream_id))
                client.send(_window_update(0, len(body)))
            return answers
        finally:
            client.close()

    assert _serve_raw(scenario) == [body, body]


@pytest.mark.parametrize("path", [b"/echo", b"/unary"])
def test_a_request_that_declares_its_content_length_is_read_whole(path: bytes) -> None:
    """h2load, nghttp and curl send ``content-length``, which zttp checks against the DATA it parses
    (RFC 9113 8.1.1): such a stream's DATA goes to zttp as it came, and it is answered; a call without
    one on the same connection still is."""
    body = np.random.default_rng(9).bytes(40_000)

    def scenario(port: int) -> list[bytes]:
        client = FrameClient(port)
        try:
            answers = []
            for declared in ([(b"content-length", b"40000")], []):
                headers = [(b"host", b"inferd"), *GRPC_HEADERS, *declared]
                stream = client.zttp.send_request(b"POST", path, b"2", headers)
                parts = [body[:16_384], body[16_384:32_768], body[32_768:]]
                frames = [_frame(0x0, 0x1 if i == 2 else 0, stream.stream_id, part) for i, part in enumerate(parts)]
                client.send(client.zttp.data_to_send() + b"".join(frames))
                while not client.ended(stream.stream_id):
                    assert client.read_frame()[0] != 0x3, "the stream was reset"
                answers.append(client.data(stream.stream_id))
                client.send(_window_update(0, len(body)))
            return answers
        finally:
            client.close()

    assert _serve_raw(scenario) == [body, body]


# DataSender itself: frames cut at the window and frame-size boundaries


def _sender(writes: list[bytes]) -> DataSender:
    sender = DataSender(lambda data: writes.append(bytes(data)))
    sender.settings([(0x4, 1 << 30), (0x5, 16_384)])
    sender.window_update(0, (1 << 31) - 1 - 65_535)
    return sender


def _data_frames(writes: list[bytes]) -> list[tuple[int, int, bytes]]:
    """(stream id, length, payload) of each DATA frame in what the sender wrote."""
    wire, frames, pos = b"".join(writes), [], 0
    while pos < len(wire):
        length = int.from_bytes(wire[pos : pos + 3], "big")
        assert wire[pos + 3] == 0x0 and wire[pos + 4] == 0  # DATA, no flags (the end is zttp's)
        frames.append((int.from_bytes(wire[pos + 5 : pos + 9], "big"), length, wire[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return frames


@pytest.mark.parametrize("size", [1, 16_383, 16_384, 16_385, 32_768, 65_536 + 7])
def test_bodies_are_cut_at_the_max_frame_size(size: int) -> None:
    writes: list[bytes] = []
    sender = _sender(writes)
    sender.open(1)
    body = np.arange(size, dtype=np.uint8).tobytes()
    sender.send(1, [body[:3], memoryview(body)[3:]])
    frames = _data_frames(writes)
    assert [length for _, length, _ in frames] == [16_384] * (size // 16_384) + (
        [size % 16_384] if size % 16_384 else []
    )
    assert b"".join(payload for _, _, payload in frames) == body and sender.pending(1) == 0


def test_an_array_body_counts_its_bytes_and_waits_for_windows_in_order() -> None:
    """A float32 array (memoryview items of 4 bytes) goes out as its bytes; two streams that wait on
    the connection's window resume oldest first; a stream's end waits for its last byte."""
    writes: list[bytes] = []
    sender = DataSender(lambda data: writes.append(bytes(data)))  # the defaults: 65,535-byte windows
    ended: list[int] = []
    array = np.arange(20_000, dtype=np.float32)  # 80,000 bytes
    sender.open(1)
    sender.open(3)
    sender.send(1, [array])
    sender.after(1, lambda: ended.append(1))
    sender.send(3, [b"x" * 10])
    sender.after(3, lambda: ended.append(3))
    assert sender.pending(1) == 80_000 - 65_535 and sender.pending(3) == 10 and ended == []
    sender.window_update(0, 100_000)  # the connection opens; stream 1's own window is spent
    assert sender.pending(1) == 80_000 - 65_535 and sender.pending(3) == 0 and ended == [3]
    sender.window_update(1, 80_000 - 65_535 - 1)
    assert sender.pending(1) == 1 and ended == [3]
    sender.settings([(0x4, 65_536)])  # +1 on every open stream's window
    assert sender.pending(1) == 0 and ended == [3, 1]
    sent = b"".join(p for sid, _, p in _data_frames(writes) if sid == 1)
    assert sent == array.tobytes()


def test_a_shrunk_window_goes_negative_and_a_closed_stream_drops_what_waits() -> None:
    writes: list[bytes] = []
    sender = DataSender(lambda data: writes.append(bytes(data)))
    sender.open(1)
    sender.send(1, [b"a" * 1_000])
    sender.settings([(0x4, 100)])  # the stream's window: 65,535 - 1,000 - 65,435 = -900
    sender.send(1, [b"b" * 10])
    sender.window_update(1, 900)  # back to 0: still nothing
    assert sender.pending(1) == 10
    sender.window_update(1, 4)
    assert sender.pending(1) == 6
    sender.close(1)
    sender.window_update(0, 1_000)
    sender.after(1, lambda: writes.append(b"ended"))  # a gone stream's end runs at once
    assert sender.pending(1) == 0 and writes[-1] == b"ended"
    assert b"".join(p for _, _, p in _data_frames(writes[:-1])) == b"a" * 1_000 + b"b" * 4
