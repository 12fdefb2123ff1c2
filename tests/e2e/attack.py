"""Helpers of the attack suites (``test_attack_http.py``, ``test_attack_h2.py``): a server's
memory, raw sockets that do not read, waiting for a close."""

from __future__ import annotations

import socket
import time

from inferd.testing import ServerProcess

#: How much a server's RSS may grow under one attack. The unbounded code grew by hundreds of MB
#: in the same time; a bounded connection holds a few buffers.
RSS_GROWTH_MB = 50


def rss_mb(server: ServerProcess) -> float:
    """The server process's resident memory (VmRSS), in MB."""
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def non_reader(port: int) -> socket.socket:
    """A connection to ``port`` whose receive buffer is as small as the kernel allows (and which
    the test never reads), so what the server sends piles up on the server's side."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    return sock


def send_for(sock: socket.socket, chunk: bytes, seconds: float) -> int:
    """Send ``chunk`` over and over for ``seconds`` (or until the server stops reading for a
    second, or closes); returns the bytes sent."""
    sock.settimeout(1.0)
    sent = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # the server stopped reading (timeout) or closed the connection
        pass
    return sent


def read_until_closed(sock: socket.socket, seconds: float) -> tuple[bytes, bool]:
    """What the server sends until it closes the connection (True), or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    received = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            return received, False
        except OSError:  # reset
            return received, True
        if not data:
            return received, True
        received += data
    return received, False
