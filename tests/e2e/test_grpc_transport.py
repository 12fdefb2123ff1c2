"""What the gRPC transports do around the service: deadlines, message sizes, compression, bad input.

Deadlines and sizes hold for both transports; the raw HTTP/2 cases (malformed frames, oversized
lengths, half-closed and reset streams) are sent to ``--grpc-transport h2`` with a raw client.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.h2_client import GRPC_HEADERS, RawConnection, message
from tests.python_models import python_model, source
from tests.servers import Servers
from tests.triton_clients import add_sub_inputs, tensor

LIVE = "/inference.GRPCInferenceService/ServerLive"
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
#: Small enough that a ModelMetadata answer or an add_sub request is over it; ServerLive is not.
MAX_BYTES = 64


@pytest.fixture(scope="module", params=["grpcio", "h2"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    repo = {"sleep": python_model("sleep")}
    with serve(repo, "--grpc-transport", request.param) as proc:
        proc.transport = request.param
        yield proc


@pytest.fixture(scope="module", params=["grpcio", "h2"])
def small_server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    args = ["--grpc-transport", request.param, f"--grpc-max-message-bytes={MAX_BYTES}"]
    with serve({"add_sub": models.add_sub()}, *args) as proc:
        yield proc


#: 1000 zero bytes, gzipped to a few dozen: inside ``MAX_BYTES`` on the wire, far past it inflated.
BOMB = zlib.compress(bytes(1000), wbits=31)


@pytest.fixture(scope="module")
def small_h2(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--grpc-transport", "h2", f"--grpc-max-message-bytes={MAX_BYTES}")


@pytest.fixture(scope="module")
def h2_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = write_repository(
        tmp_path_factory.mktemp("h2") / "models", {"add_sub": models.add_sub(), "echo": models.simple(ECHO, ECHO_PY)}
    )
    proc = ServerProcess([repo], ["--grpc-transport", "h2"]).start()
    yield proc
    proc.stop()


ECHO = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
ECHO_PY = source("double")


def sleep_input(seconds: float) -> list[grpcclient.InferInput]:
    return [tensor("SECONDS", np.array([seconds], np.float32), "FP32")]


def test_deadline_exceeded(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("sleep", sleep_input(1.0), client_timeout=0.2)
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        result = client.infer("sleep", sleep_input(0.0), client_timeout=10)
        assert result.as_numpy("SECONDS_OUT").tolist() == [0.0]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request(server: ServerProcess, algorithm: str) -> None:
    """Both transports decompress a compressed request, unary and streamed."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("sleep", sleep_input(0.25), compression_algorithm=algorithm)
        assert result.as_numpy("SECONDS_OUT").tolist() == [0.25]
        results: list[object] = []
        client.start_stream(
            callback=lambda result, error: results.append(error or result), compression_algorithm=algorithm
        )
        client.async_stream_infer("sleep", sleep_input(0.0), request_id="zipped")
        client.stop_stream()
        (streamed,) = results
        assert streamed.as_numpy("SECONDS_OUT").tolist() == [0.0]  # type: ignore[attr-defined]


def test_stream_cancelled_with_a_request_in_flight(server: ServerProcess) -> None:
    """The client cancels a stream while its request runs: the server goes on serving."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer("sleep", sleep_input(0.5), request_id="gone")
        time.sleep(0.1)
        client.stop_stream(cancel_requests=True)
        assert client.infer("sleep", sleep_input(0.0)).as_numpy("SECONDS_OUT").tolist() == [0.0]
    time.sleep(0.6)
    assert "Exception in ASGI application" not in server.log()


def test_max_message_sizes(small_server: ServerProcess) -> None:
    with grpc.insecure_channel(small_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="add_sub"))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with grpcclient.InferenceServerClient(small_server.grpc_url) as client:
        a = np.ones((1, 4), np.float32)
        with pytest.raises(InferenceServerException) as error:
            client.infer("add_sub", add_sub_inputs(grpcclient, a, a))
        assert error.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.is_server_live()


# -- bad input on the h2 transport ----------------------------------------------------------------


def grpc_status(answer: object) -> tuple[int, str]:
    trailers = answer.trailers or answer.headers  # type: ignore[attr-defined]
    return int(trailers[b"grpc-status"]), trailers.get(b"grpc-message", b"").decode()


def assert_up(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live()
        a = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal(
            client.infer("add_sub", add_sub_inputs(grpcclient, a, a)).as_numpy("OUTPUT0"), a + a
        )


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        (LIVE, b"\0\0\0\0\x10abc", 13, "truncated gRPC message"),
        (LIVE, b"\0\0\0", 13, "truncated gRPC message"),
        (LIVE, b"\0\xff\xff\xff\xff", 8, "Received message larger than max (4294967295 vs. 2147483647)"),
        (LIVE, b"\x01\0\0\0\0", 12, "compressed messages are not supported"),
        (LIVE, b"\x07\0\0\0\0", 13, "malformed gRPC frame"),
        (LIVE, b"", 13, "one request message, this one sent 0"),
        (LIVE, message(b"") * 2, 13, "one request message, this one sent 2"),
        (LIVE, message(b"\xff\xff"), 13, "Exception deserializing request!"),
        (INFER, message(b"\x0a\x05ab"), 3, "failed to parse the ModelInferRequest"),
        ("/inference.GRPCInferenceService/NoSuchRpc", message(b""), 12, "Method not found!"),
        ("/grpc.health.v1.Health/Watch", message(b""), 12, "Method not found!"),
        (STREAM, message(b"") + b"\0\0", 13, "truncated gRPC message"),
    ],
)
def test_bad_calls_get_a_status(h2_server: ServerProcess, path: str, body: bytes, status: int, says: str) -> None:
    conn = RawConnection(h2_server.grpc_port)
    try:
        answer = conn.wait(conn.call(path, body).stream_id)
        assert answer.status == 200 and not answer.reset
        assert grpc_status(answer)[0] == status
        assert says in grpc_status(answer)[1]
    finally:
        conn.close()
    assert_up(h2_server)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"\x01\0\0\0\x04junk", 13, "failed to decompress the request message"),
        (
            b"\x01" + len(BOMB).to_bytes(4, "big") + BOMB,
            8,
            f"Received message larger than max (> {MAX_BYTES} decompressed)",
        ),
    ],
)
def test_bad_compressed_messages(small_h2: ServerProcess, body: bytes, status: int, says: str) -> None:
    """A corrupt gzip message, and one that inflates past the size limit (a zip bomb), are errors."""
    conn = RawConnection(small_h2.grpc_port)
    try:
        answer = conn.wait(conn.call(LIVE, body, [*GRPC_HEADERS, (b"grpc-encoding", b"gzip")]).stream_id)
    finally:
        conn.close()
    assert grpc_status(answer)[0] == status and says in grpc_status(answer)[1]


def test_malformed_grpc_timeout(h2_server: ServerProcess) -> None:
    conn = RawConnection(h2_server.grpc_port)
    try:
        answer = conn.wait(conn.call(LIVE, message(b""), [*GRPC_HEADERS, (b"grpc-timeout", b"soon")]).stream_id)
    finally:
        conn.close()
    assert grpc_status(answer) == (13, "malformed grpc-timeout header: 'soon'")


def test_grpc_message_is_percent_encoded(h2_server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="ünknown\n").SerializeToString()
    conn = RawConnection(h2_server.grpc_port)
    try:
        answer = conn.wait(conn.call(INFER, message(request)).stream_id)
    finally:
        conn.close()
    raw = answer.trailers[b"grpc-message"]
    assert b"%C3%BCnknown%0A" in raw and all(0x20 <= b < 0x7F for b in raw)


def test_compression_header_and_not_grpc(h2_server: ServerProcess) -> None:
    conn = RawConnection(h2_server.grpc_port)
    try:
        snappy = conn.call(LIVE, message(b""), [*GRPC_HEADERS, (b"grpc-encoding", b"snappy")])
        plain = conn.call(LIVE, b"{}", [(b"content-type", b"application/json")])
        answer = conn.wait(snappy.stream_id)
        assert grpc_status(answer)[0] == 12 and "grpc-encoding 'snappy' is not supported" in grpc_status(answer)[1]
        assert answer.trailers[b"grpc-accept-encoding"] == b"identity,deflate,gzip"
        assert conn.wait(plain.stream_id).status == 415
    finally:
        conn.close()
    assert_up(h2_server)


def test_reset_and_abandoned_streams_leave_the_server_up(h2_server: ServerProcess) -> None:
    """A stream reset mid-message, one left half-sent on a dropped connection, garbage bytes."""
    conn = RawConnection(h2_server.grpc_port)
    stream = conn.call(STREAM, b"\0\0\0\0\x20abc", end=False)
    stream.reset()
    conn.flush()
    conn.call(INFER, b"\0\0\0\x01\0", end=False)
    live = conn.call(LIVE, message(b""))
    assert grpc_status(conn.wait(live.stream_id)) == (0, "")
    conn.close()
    garbage = RawConnection(h2_server.grpc_port)
    garbage.flush()  # the preface, then a CONTINUATION frame out of place
    garbage.send_raw(b"\0\0\x04\x09\0\0\0\0\x01nope")
    assert garbage.wait(1).status == 0 and garbage.closed
    garbage.close()
    assert_up(h2_server)


def test_stream_half_closed_after_requests(h2_server: ServerProcess) -> None:
    """Two requests then END_STREAM: both answered, then status OK in the trailers."""
    request = service_pb2.ModelInferRequest(model_name="add_sub", id="r")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.ones((1, 4), np.float32).tobytes())
    body = message(request.SerializeToString())
    conn = RawConnection(h2_server.grpc_port)
    try:
        answer = conn.wait(conn.call(STREAM, body + body).stream_id)
    finally:
        conn.close()
    assert grpc_status(answer) == (0, "")
    responses = []
    data = answer.body
    while data:
        size = int.from_bytes(data[1:5], "big")
        responses.append(service_pb2.ModelStreamInferResponse.FromString(data[5 : 5 + size]))
        data = data[5 + size :]
    assert [r.infer_response.id for r in responses] == ["r", "r"]
    assert all(not r.error_message for r in responses)


def test_one_channel_outlives_the_streams_a_connection_takes(h2_server: ServerProcess) -> None:
    """More calls than zttp lets one connection carry, 32 at a time on one channel: none fails."""
    calls = 4096 + 1000

    async def run() -> list[bool]:
        async with grpc.aio.insecure_channel(h2_server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

            async def worker(n: int) -> list[bool]:
                return [(await stub.ServerLive(service_pb2.ServerLiveRequest())).live for _ in range(n)]

            done = await asyncio.gather(*(worker(calls // 32) for _ in range(32)))
            return [live for batch in done for live in batch]

    answers = asyncio.run(run())
    assert len(answers) == calls // 32 * 32 > 4096 and all(answers)


def _good_infer() -> bytes:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    request = service_pb2.ModelInferRequest(
        model_name="add_sub",
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(name=n, datatype="FP32", shape=[1, 4])
            for n in ("INPUT0", "INPUT1")
        ],
        raw_input_contents=[a.tobytes(), a.tobytes()],
    )
    return message(request.SerializeToString())


#: Calls the short path of ``h2_unary`` answers (plain unary calls), good and bad.
SHORT_PATH_CALLS = [
    (INFER, _good_infer()),
    (INFER, message(service_pb2.ModelInferRequest(model_name="nope").SerializeToString())),
    (INFER, message(b"\x0a\x05ab")),
    (LIVE, message(b"")),
    (LIVE, message(b"") * 2),
    (LIVE, b"\0\0\0"),
    (LIVE, b"\x01\0\0\0\0"),
    ("/inference.GRPCInferenceService/ModelMetadata", message(b"\x0a\x07add_sub")),
    ("/inference.GRPCInferenceService/ModelMetadata", message(b"\x0a\x04nope")),
]


@pytest.mark.parametrize("te", [True, False], ids=["te-trailers", "no-te"])
@pytest.mark.parametrize(("path", "body"), SHORT_PATH_CALLS)
def test_short_path_answers_as_the_asgi_path(h2_server: ServerProcess, path: str, body: bytes, te: bool) -> None:
    """A plain unary call skips ASGI; the same call with a deadline goes through it. Both answers
    (status, headers, message, trailers) must be the same, byte for byte."""
    headers = GRPC_HEADERS if te else [h for h in GRPC_HEADERS if h[0] != b"te"]
    conn = RawConnection(h2_server.grpc_port)
    try:
        short = conn.wait(conn.call(path, body, headers).stream_id)
        asgi = conn.wait(conn.call(path, body, [*headers, (b"grpc-timeout", b"100S")]).stream_id)
    finally:
        conn.close()
    assert short.status == 200 and not short.reset
    assert short == asgi
    if te:
        assert b"grpc-status" in short.trailers
    else:  # no ``te: trailers``: neither path sends trailers (uvicorn drops them)
        assert short.trailers == {}


def test_large_messages_both_ways(h2_server: ServerProcess) -> None:
    """16 MiB in and out of one unary call (HTTP/2 flow control on both sides), twice at once."""
    x = np.random.default_rng(3).random(4 << 20, dtype=np.float32)
    with grpcclient.InferenceServerClient(h2_server.grpc_url) as client:
        results = []
        for _ in range(2):
            client.async_infer(
                "echo", [tensor("X", x, "FP32")], callback=lambda result, error: results.append((result, error))
            )
        deadline = time.monotonic() + 60
        while len(results) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(results) == 2
    for result, error in results:
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("Y"), x * 2)


@pytest.mark.parametrize("deadline", [None, 60.0], ids=["short-path", "asgi-path"])
@pytest.mark.parametrize("elements", [1 << 20, 6 << 20], ids=["4MiB+", "24MiB"])
def test_large_answers_on_a_fresh_connection(h2_server: ServerProcess, elements: int, deadline: float | None) -> None:
    """The first call of a new connection, its answer larger than the client's first 4 MiB window:
    the server reads the client's WINDOW_UPDATEs (and its SETTINGS, acked before DATA framed by
    them) while the request it sent whole is still being answered."""
    x = np.random.default_rng(elements).random(elements, dtype=np.float32)
    own_connection = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1),
                      ("grpc.max_send_message_length", -1)]  # fmt: skip
    with grpcclient.InferenceServerClient(h2_server.grpc_url, channel_args=own_connection) as client:
        result = client.infer("echo", [tensor("X", x, "FP32")], client_timeout=deadline)
        np.testing.assert_array_equal(result.as_numpy("Y"), x * 2)


@pytest.mark.parametrize("deadline", [None, 60.0], ids=["short-path", "asgi-path"])
def test_large_requests_past_the_connection_window_on_one_connection(
    h2_server: ServerProcess, deadline: float | None
) -> None:
    """Four 12 MiB requests on one connection: 48 MiB, more than the 32 MiB the server's connection
    window opens and more than a stream's 8 MiB each, so the calls go through only if the server
    grants the DATA it reads itself (WINDOW_UPDATE); every answer is checked."""
    own_connection = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1),
                      ("grpc.max_send_message_length", -1)]  # fmt: skip
    with grpcclient.InferenceServerClient(h2_server.grpc_url, channel_args=own_connection) as client:
        for seed in range(4):
            x = np.random.default_rng(seed).random(3 << 20, dtype=np.float32)
            result = client.infer("echo", [tensor("X", x, "FP32")], client_timeout=deadline)
            np.testing.assert_array_equal(result.as_numpy("Y"), x * 2)


def test_concurrent_large_requests_each_get_their_own_answer(h2_server: ServerProcess) -> None:
    """Rounds of four 2 MiB calls at once, each with its own values: request bodies joined into the
    server's reused buffers never mix (a buffer is reused only once nothing holds it)."""
    inputs = [np.random.default_rng(100 + i).random(1 << 19, dtype=np.float32) for i in range(12)]
    results: dict[int, Any] = {}
    with grpcclient.InferenceServerClient(h2_server.grpc_url) as client:
        for start in range(0, 12, 4):
            for i in range(start, start + 4):
                client.async_infer(
                    "echo",
                    [tensor("X", inputs[i], "FP32")],
                    callback=lambda result, error, i=i: results.update({i: error or result}),
                )
            deadline = time.monotonic() + 60
            while len(results) < start + 4 and time.monotonic() < deadline:
                time.sleep(0.02)
    assert sorted(results) == list(range(12))
    for i, x in enumerate(inputs):
        np.testing.assert_array_equal(results[i].as_numpy("Y"), x * 2)


#: --grpc-max-message-bytes of ``big_h2``: 16 MiB and more.
BIG_MAX = 18 << 20


@pytest.fixture(scope="module")
def big_h2(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--grpc-transport", "h2", f"--grpc-max-message-bytes={BIG_MAX}")


def _padded_live(size: int) -> bytes:
    """A ServerLiveRequest of exactly ``size`` bytes: one unknown field (15) that protobuf keeps."""
    payload = size - 1 - 4  # tag, a 4-byte varint length
    length = bytes(((payload >> shift) & 0x7F) | (0x80 if shift < 21 else 0) for shift in (0, 7, 14, 21))
    return b"\x7a" + length + bytes(payload)


@pytest.mark.parametrize(("size", "status"), [(BIG_MAX, 0), (BIG_MAX + 1, 8)], ids=["at-max", "one-over"])
def test_a_message_at_the_max_size_is_taken_and_one_byte_more_refused(
    big_h2: ServerProcess, size: int, status: int
) -> None:
    body = _padded_live(size)
    assert len(body) == size
    conn = RawConnection(big_h2.grpc_port)
    try:
        answer = conn.wait(conn.call(LIVE, message(body)).stream_id)
    finally:
        conn.close()
    assert answer.status == 200 and grpc_status(answer)[0] == status
    if status:
        assert grpc_status(answer)[1] == f"Received message larger than max ({size} vs. {BIG_MAX})"


def test_a_length_prefix_split_across_frames_is_refused_before_the_body(big_h2: ServerProcess) -> None:
    """The prefix arrives in two DATA frames (3 bytes, then 2) and declares more than the max: the
    call is answered RESOURCE_EXHAUSTED at once and its stream reset (NO_ERROR), the body unsent."""
    declared = (BIG_MAX + 5).to_bytes(4, "big")
    conn = RawConnection(big_h2.grpc_port)
    try:
        stream_id = conn.call(LIVE, b"", end=False).stream_id
        data = [b"\0" + declared[:2], declared[2:]]
        conn.send_raw(b"".join(len(d).to_bytes(3, "big") + b"\0\0" + stream_id.to_bytes(4, "big") + d for d in data))
        answer = conn.wait(stream_id)
    finally:
        conn.close()
    assert grpc_status(answer) == (8, f"Received message larger than max ({BIG_MAX + 5} vs. {BIG_MAX})")
    assert_up_live(big_h2)


def assert_up_live(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live()


# -- the grpcio transport's servers sharing one port ------------------------------------------------


@pytest.mark.parametrize("transport", ["grpcio", "h2"])
@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "so_reuseport"])
def test_a_port_another_program_listens_on_is_a_start_up_error(
    tmp_path: Path, transport: str, reuse_port: bool
) -> None:
    """Even when that program set SO_REUSEPORT: the grpcio transport's servers share their port
    among themselves, never with another server."""
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    with socket.socket() as taken:
        if reuse_port:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = ServerProcess([repo], ["--grpc-transport", transport, "--grpc-address", "127.0.0.1"])
        srv.grpc_port = taken.getsockname()[1]
        done = subprocess.run(srv.command(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"error: gRPC frontend cannot bind 127.0.0.1:{srv.grpc_port}: Address already in use" in done.stderr


def test_calls_on_many_connections_are_all_answered(tmp_path: Path) -> None:
    """64 clients, each on its own connection (spread over the transport's servers), 20 calls each,
    every answer its own request's sum."""
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    with ServerProcess([repo], ["--grpc-transport", "grpcio"]) as srv:

        def client_calls(index: int) -> list[float]:
            with grpcclient.InferenceServerClient(srv.grpc_url) as client:
                sums = []
                for call in range(20):
                    a = np.full((1, 4), index, np.float32)
                    b = np.full((1, 4), call, np.float32)
                    sums.append(
                        float(client.infer("add_sub", add_sub_inputs(grpcclient, a, b)).as_numpy("OUTPUT0")[0, 0])
                    )
                return sums

        with ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(client_calls, range(64)))
    assert answers == [[float(index + call) for call in range(20)] for index in range(64)]
