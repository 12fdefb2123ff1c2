"""The h2 transport's wire details: length-prefixed messages, grpc-timeout, grpc-message."""

from __future__ import annotations

import zlib

import grpc
import pytest

from inferd.frontends.grpc.framing import GrpcFailure, MessageReader, frame, parse_timeout, percent_encode


def prefixed(payload: bytes) -> bytes:
    return b"\0" + len(payload).to_bytes(4, "big") + payload


def test_messages_whole_in_one_chunk() -> None:
    reader = MessageReader(100)
    out = reader.feed(prefixed(b"one") + prefixed(b"") + prefixed(b"three"))
    assert [bytes(m) for m in out] == [b"one", b"", b"three"]
    reader.finish()


@pytest.mark.parametrize("size", [1, 2, 4, 5, 7, 64])
def test_messages_cut_at_any_byte(size: int) -> None:
    """However the body is cut into chunks, the same messages come out, in order."""
    payloads = [b"a" * 3, b"", b"b" * 40, b"c"]
    data = b"".join(prefixed(p) for p in payloads)
    reader = MessageReader(100)
    out = []
    for start in range(0, len(data), size):
        out += [bytes(m) for m in reader.feed(data[start : start + size])]
    reader.finish()
    assert out == payloads


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_compressed_messages_are_inflated(encoding: str, wbits: int, size: int) -> None:
    """Messages flagged compressed come out as sent; plain ones beside them pass as they are."""
    payloads = [b"x" * 300, b"plain", b"\0" * 90]
    data = b""
    for i, payload in enumerate(payloads):
        if i == 1:
            data += prefixed(payload)
            continue
        packed = zlib.compress(payload, wbits=wbits)
        data += b"\x01" + len(packed).to_bytes(4, "big") + packed
    reader = MessageReader(300, encoding)
    out = []
    for start in range(0, len(data), size):
        out += [bytes(m) for m in reader.feed(data[start : start + size])]
    reader.finish()
    assert out == payloads


def test_inflated_size_is_bounded() -> None:
    packed = zlib.compress(bytes(301), wbits=31)
    with pytest.raises(GrpcFailure) as info:
        MessageReader(300, "gzip").feed(b"\x01" + len(packed).to_bytes(4, "big") + packed)
    assert info.value.status is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_messages_come_out_read_only() -> None:
    reader = MessageReader(100)
    data = prefixed(b"abcdef")
    out = reader.feed(data[:3]) + reader.feed(data[3:])
    assert bytes(out[0]) == b"abcdef" and out[0].readonly


def test_truncated_body_fails_on_finish() -> None:
    reader = MessageReader(100)
    assert reader.feed(prefixed(b"abcdef")[:8]) == []
    with pytest.raises(GrpcFailure) as info:
        reader.finish()
    assert info.value.status is grpc.StatusCode.INTERNAL
    assert info.value.message == "truncated gRPC message: the request ended after 8 of 11 bytes"


@pytest.mark.parametrize(
    ("prefix", "status", "says"),
    [
        (b"\0\0\0\0\x65", grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (101 vs. 100)"),
        (b"\x01\0\0\0\x01", grpc.StatusCode.UNIMPLEMENTED, "compressed messages are not supported"),
        (b"\x02\0\0\0\x01", grpc.StatusCode.INTERNAL, "malformed gRPC frame: compressed flag 2"),
    ],
)
def test_bad_prefix_fails_before_the_body(prefix: bytes, status: grpc.StatusCode, says: str) -> None:
    with pytest.raises(GrpcFailure) as info:
        MessageReader(100).feed(prefix)
    assert info.value.status is status and says in info.value.message


def test_frame() -> None:
    assert frame([b"ab", memoryview(b"cde")], 5) == b"\0\0\0\0\x05abcde"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1S", 1.0), ("250m", 0.25), ("3M", 180.0), ("2H", 7200.0), ("5u", 5e-6), ("99999999n", 0.099999999)],
)
def test_parse_timeout(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "S", "10", "123456789S", "1x", "-1S", "1.5S"])
def test_parse_timeout_refuses_malformed(value: str) -> None:
    with pytest.raises(GrpcFailure):
        parse_timeout(value)


def test_percent_encode() -> None:
    assert percent_encode("plain text: ok") == b"plain text: ok"
    assert percent_encode("50% ü\n") == b"50%25 %C3%BC%0A"
