"""Long gRPC streams on a non-decoupled model over ``--grpc-transport h2``: a client that keeps up
with the server's answers is not taken for a flood, and one that opens its flow-control windows
as far as HTTP/2 allows can give back every byte of the answers without the server finding them
past the limit.

gRPC clients (grpc C-core: tritonclient, perf_analyzer) answer every DATA frame they read with a
WINDOW_UPDATE for the connection and one for the stream: two per message on a busy stream, more
than the control-frame allowance refills (5,000 a second). The server used to count them and close
the connection with GOAWAY ENHANCE_YOUR_CALM after ~12 s of ``perf_analyzer -i grpc --streaming``;
and zttp, fed every WINDOW_UPDATE while inferd sends the DATA itself, closed the connection with
FLOW_CONTROL_ERROR once the increments added up past 2^31 - 1 (after 2 GiB of answers on a
connection that tritonclient opened).
"""

from __future__ import annotations

import queue
import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from inferd.serving.h2 import CONTROL_FRAME_BURST
from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x4, 0x6, 0x7, 0x8
ENHANCE_YOUR_CALM = 0xB
#: The largest flow-control window HTTP/2 allows (RFC 9113, 6.9.1).
WINDOW_LIMIT = 2**31 - 1
STREAM_INFER = b"/inference.GRPCInferenceService/ModelStreamInfer"


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--grpc-transport", "h2")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


def stream_headers(stream: int) -> bytes:
    """HEADERS (END_HEADERS) opening a ModelStreamInfer call: HPACK literals, no Huffman, no index."""
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", STREAM_INFER),
        (b":authority", b"inferd"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    block = b"".join(b"\0" + bytes([len(n)]) + n + bytes([len(v)]) + v for n, v in fields)
    return frame(HEADERS, 0x4, stream, block)


def add_sub_message(i: int) -> bytes:
    """One gRPC message: an add_sub request with INPUT0 = [i, i, i, i], INPUT1 = ones."""
    request = service_pb2.ModelInferRequest(
        model_name="add_sub",
        id=str(i),
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(name=n, datatype="FP32", shape=[1, 4])
            for n in ("INPUT0", "INPUT1")
        ],
        raw_input_contents=[np.full(4, i, np.float32).tobytes(), np.ones(4, np.float32).tobytes()],
    )
    body = request.SerializeToString()
    return b"\0" + len(body).to_bytes(4, "big") + body


class RawClient:
    """One HTTP/2 connection spoken frame by frame, windows wide open: whatever WINDOW_UPDATEs it
    sends, it chooses when."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""
        settings = (0x4).to_bytes(2, "big") + (1 << 30).to_bytes(4, "big")  # INITIAL_WINDOW_SIZE 1 GiB
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings) + window_update(0, 1 << 30))

    def next_frame(self) -> tuple[int, int, int, bytes] | None:
        """The next frame the server sent: (type, flags, stream, payload); None: closed."""
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    head, payload = self.buffer[:9], self.buffer[9 : 9 + length]
                    self.buffer = self.buffer[9 + length :]
                    return head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, payload
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                return None
            self.buffer += data

    def stream_calls(self, stream: int, count: int) -> list[int]:
        """Send ``count`` add_sub requests on a new ModelStreamInfer stream (from a thread, reading
        meanwhile) and read their answers, sending no WINDOW_UPDATE: the DATA frames' sizes."""
        self.sock.sendall(stream_headers(stream))
        sender = threading.Thread(
            target=self.sock.sendall, args=(b"".join(frame(DATA, 0, stream, add_sub_message(i)) for i in range(count)),)
        )
        sender.start()
        sizes: list[int] = []
        body = b""
        messages = 0
        while messages < count:
            got = self.next_frame()
            assert got is not None, f"the server closed the connection after {messages} of {count} answers"
            kind, _flags, on, payload = got
            assert kind != GOAWAY, f"GOAWAY (code {int.from_bytes(payload[4:8], 'big')}) after {messages} answers"
            if kind == DATA and on == stream:
                sizes.append(len(payload))
                body += payload
                while len(body) >= 5 and len(body) >= 5 + int.from_bytes(body[1:5], "big"):
                    end = 5 + int.from_bytes(body[1:5], "big")
                    answer = service_pb2.ModelStreamInferResponse.FromString(body[5:end])
                    assert not answer.error_message, answer.error_message
                    body = body[end:]
                    messages += 1
        sender.join()
        return sizes

    def ping_answered(self) -> tuple[bool, int | None]:
        """Send a PING: (whether it was acknowledged, the code of a GOAWAY that came instead)."""
        self.sock.sendall(frame(PING, 0, 0, b"inferd!!"))
        while (got := self.next_frame()) is not None:
            kind, flags, _on, payload = got
            if kind == GOAWAY:
                return False, int.from_bytes(payload[4:8], "big")
            if kind == PING and flags & 0x1 and payload == b"inferd!!":
                return True, None
        return False, None


def test_window_updates_that_answer_the_servers_data_are_not_a_flood(server: ServerProcess) -> None:
    """Thousands of answers read, then the WINDOW_UPDATEs a gRPC client sends for them (one for the
    connection and one for the stream per DATA frame), all at once: more than the allowance's
    whole burst, and every one of them gives back window the server's own answers took."""
    count = CONTROL_FRAME_BURST // 2 + 1000
    client = RawClient(server.grpc_port)
    try:
        sizes = client.stream_calls(1, count)
        updates = [window_update(0, size) + window_update(1, size) for size in sizes if size]
        assert 2 * len(updates) > CONTROL_FRAME_BURST
        client.sock.sendall(b"".join(updates))
        answered, goaway = client.ping_answered()
        assert answered, f"the connection was closed (GOAWAY code {goaway}) for WINDOW_UPDATEs answering its DATA"
        assert len(client.stream_calls(3, 10)) >= 10  # and it still serves
    finally:
        client.sock.close()


def test_window_updates_beyond_what_the_server_sent_are_still_a_flood(server: ServerProcess) -> None:
    """Answers earn one WINDOW_UPDATE each, no more: a connection that sends a burst's worth
    beyond them gets GOAWAY ENHANCE_YOUR_CALM."""
    client = RawClient(server.grpc_port)
    try:
        sizes = client.stream_calls(1, 100)
        answers = b"".join(window_update(0, size) + window_update(1, size) for size in sizes)
        client.sock.sendall(answers + window_update(0, 1) * (CONTROL_FRAME_BURST + 1000))
        answered, goaway = client.ping_answered()
    finally:
        client.sock.close()
    assert not answered and goaway == ENHANCE_YOUR_CALM


def test_a_tritonclient_stream_of_thousands_of_calls_to_a_non_decoupled_model(server: ServerProcess) -> None:
    """tritonclient's gRPC streaming API, one stream, as fast as it goes for a few seconds: every
    call is answered, with its own sums."""
    answers: queue.Queue[tuple[str, np.ndarray, np.ndarray] | Exception] = queue.Queue()

    def callback(result: grpcclient.InferResult | None, error: Exception | None) -> None:
        if error is not None:
            answers.put(error)
        else:
            assert result is not None
            answers.put((result.get_response().id, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")))

    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback)
    ones = np.ones((1, 4), np.float32)
    sent = 0
    deadline = time.monotonic() + 6.0
    try:
        while time.monotonic() < deadline:
            for _ in range(200):
                a = np.full((1, 4), sent, np.float32)
                inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(ones)
                client.async_stream_infer("add_sub", inputs, request_id=str(sent))
                sent += 1
            while answers.qsize() < sent - 1000:  # keep at most 1,000 calls in flight
                time.sleep(0.001)
        got = [answers.get(timeout=30) for _ in range(sent)]
    finally:
        client.stop_stream()
        client.close()
    errors = [g for g in got if isinstance(g, Exception)]
    assert not errors, f"{len(errors)} of {sent} calls failed, the first: {errors[0]}"
    assert sent > 2000
    for request_id, out0, out1 in got:  # type: ignore[misc]
        i = float(request_id)
        assert out0.tolist() == [[i + 1] * 4] and out1.tolist() == [[i - 1] * 4], request_id


def test_window_updates_answering_data_on_windows_open_to_the_limit(server: ServerProcess) -> None:
    """Windows opened to the most HTTP/2 allows (2^31 - 1: the connection's by WINDOW_UPDATE, every
    stream's by SETTINGS), then each answer's DATA given back: the windows are at the limit again,
    never past it. zttp, fed these WINDOW_UPDATEs while inferd sends the DATA itself, counted only
    the increments and closed the connection with GOAWAY FLOW_CONTROL_ERROR: with a gRPC client
    that opens less, after 2 GiB of answers (this test used to send 2.2 GiB through tritonclient;
    the same count passes the limit here with a few kilobytes)."""
    client = RawClient(server.grpc_port)
    try:  # RawClient opened 65,535 + 2^30 on the connection and 2^30 on each stream
        settings = (0x4).to_bytes(2, "big") + WINDOW_LIMIT.to_bytes(4, "big")
        client.sock.sendall(frame(SETTINGS, 0, 0, settings) + window_update(0, WINDOW_LIMIT - 65_535 - (1 << 30)))
        sizes = client.stream_calls(1, 20)
        assert sum(sizes) > 0
        client.sock.sendall(b"".join(window_update(0, size) + window_update(1, size) for size in sizes if size))
        answered, goaway = client.ping_answered()
        assert answered, f"the connection was closed (GOAWAY code {goaway}) for WINDOW_UPDATEs giving back its DATA"
        assert len(client.stream_calls(3, 10)) >= 10  # and a new stream, on the windows at the limit, is served
    finally:
        client.sock.close()


PERF_ANALYZER = shutil.which("perf_analyzer")


@pytest.mark.slow
@pytest.mark.skipif(
    PERF_ANALYZER is None,
    reason="perf_analyzer is not on PATH: it is not a test dependency (PyPI's perf-analyzer here is a "
    "placeholder; tritonclient 2.41's wheel ships the binary, which needs libb64 and libcudart 12)",
)
def test_perf_analyzer_streams_to_a_non_decoupled_model_for_15_seconds(server: ServerProcess) -> None:
    """NVIDIA's perf_analyzer, unmodified: ``-i grpc --streaming`` at concurrency 1 and 4, three
    5 s windows each; it used to hang once the server closed its connection for a flood."""
    floods = server.log().count("flood")  # the flood test's own
    run = subprocess.run(
        [PERF_ANALYZER, "-m", "add_sub", "-u", server.grpc_url, "-i", "grpc", "--streaming"]
        + ["-p", "5000", "-s", "1000", "--concurrency-range", "1:4:3"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("throughput:") >= 2, run.stdout[-2000:]
    assert server.log().count("flood") == floods
