"""A raw HTTP/2 client (zttp in the client role) for sending what no gRPC client would."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import zttp

GRPC_HEADERS = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]


def message(payload: bytes) -> bytes:
    """One uncompressed length-prefixed gRPC message."""
    return b"\0" + len(payload).to_bytes(4, "big") + payload


@dataclass
class Answer:
    """What came back on one stream."""

    status: int = 0
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    reset: bool = False


class RawConnection:
    """One HTTP/2 connection to ``127.0.0.1:port``."""

    def __init__(self, port: int) -> None:
        self.conn = zttp.Connection(zttp.CLIENT, protocol=zttp.HTTP2)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn.initiate_connection()
        self.answers: dict[int, Answer] = {}
        self.done: set[int] = set()
        self.closed = False

    def call(self, path: str, body: bytes, headers: list[tuple[bytes, bytes]] = GRPC_HEADERS,
             end: bool = True) -> zttp.Stream:  # fmt: skip
        """Start a POST on ``path`` carrying ``body``; half-close it when ``end``."""
        stream = self.conn.send_request(b"POST", path.encode(), b"2", [(b"host", b"inferd"), *headers])
        if body:
            stream.send_data(body)
        if end:
            stream.end_message()
        self.flush()
        return stream

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def wait(self, stream_id: int) -> Answer:
        """Read until ``stream_id`` ends (or the connection closes)."""
        while stream_id not in self.done and not self.closed:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            self.conn.receive_data(data)
            self._events()
            self.flush()
        return self.answers.setdefault(stream_id, Answer())

    def _events(self) -> None:
        while (event := self.conn.next_event()) is not zttp.NEED_DATA:
            if event is zttp.CONNECTION_CLOSED:
                self.closed = True
                return
            sid = getattr(event, "stream_id", 0)
            answer = self.answers.setdefault(sid, Answer())
            if isinstance(event, zttp.Response):
                answer.status = event.status_code
                answer.headers = dict(event.headers)
            elif isinstance(event, zttp.Data):
                answer.body += event.data
            elif isinstance(event, zttp.EndOfMessage):
                answer.trailers = dict(event.trailers)
                self.done.add(sid)
            elif isinstance(event, zttp.RstStream):
                answer.reset = True
                self.done.add(sid)

    def close(self) -> None:
        self.sock.close()
