"""The client's WINDOW_UPDATEs on inferd's HTTP/2 protocol: cut out of the byte stream before zttp
(``inferd.serving.h2_receive``) wherever reads split them, and counted by the send side
(``inferd.serving.h2_send``) as answers to the DATA frames the server sent.

Over real sockets, with gRPC clients and perf_analyzer: ``tests/e2e/test_grpc_long_streams.py``."""

from __future__ import annotations

import random

import pytest

from inferd.serving.h2_receive import CUT_FROM, FrameCutter
from inferd.serving.h2_send import DataSender, frame_header

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return frame_header(len(payload), kind, flags, stream_id) + payload


def update(stream_id: int, increment: int) -> bytes:
    return frame(0x8, 0, stream_id, increment.to_bytes(4, "big"))


HEADERS_1 = frame(0x1, 0x4, 1, b"\x83\x86")
PING = frame(0x6, 0, 0, b"12345678")
BODY = bytes(range(256)) * 40  # 10,240 bytes: cut out


def feed(data: bytes, reads: list[int]) -> list[object]:
    """``data`` fed in ``reads``: what the cutter handed on, in order (zttp's bytes joined per parse)."""
    events: list[object] = []
    cutter = FrameCutter(
        lambda stream_id, payload: events.append(("data", stream_id, bytes(payload))),
        lambda: events.append(bytes(cutter.take_for_zttp())),
        window=lambda stream_id, increment: events.append(("window", stream_id, increment)),
    )
    pos = 0
    for size in reads:
        cutter.feed(data[pos : pos + size])
        pos += size
    rest = bytes(cutter.take_for_zttp())
    if rest:
        events.append(rest)
    joined: list[object] = []
    for event in events:  # payloads split by reads, joined again
        last = joined[-1] if joined else None
        if isinstance(event, tuple) and event[0] == "data" and isinstance(last, tuple) and last[:2] == event[:2]:
            joined[-1] = ("data", event[1], last[2] + event[2])
        elif isinstance(event, bytes) and isinstance(last, bytes):
            joined[-1] = last + event
        else:
            joined.append(event)
    return joined


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_window_updates_are_cut_out_in_order_wherever_reads_split_them(seed: int | None) -> None:
    """Each WINDOW_UPDATE goes to the protocol after what came before it was parsed (the HEADERS
    that open its stream); zttp never sees one; an increment of 0 (a protocol error) and a frame
    of the wrong length go to zttp, which refuses them."""
    zero, long = update(1, 0), frame(0x8, 0, 0, b"\0\0\0\x01\0")
    data = PREFACE + HEADERS_1 + update(1, 70_000) + PING + update(0, 2**31 - 1) + zero + long
    data += frame(0x0, 0, 1, BODY) + update(1, 5)
    if seed is None:
        reads = [1] * len(data)
    else:
        rng = random.Random(seed)
        reads = []
        left = len(data)
        while left:
            reads.append(min(left, rng.choice([1, 3, 9, 12, 13, 40, 4096])))
            left -= reads[-1]
    assert feed(data, reads) == [
        PREFACE + HEADERS_1,
        ("window", 1, 70_000),
        PING,
        ("window", 0, 2**31 - 1),
        zero + long,
        ("data", 1, BODY),
        ("window", 1, 5),
        frame_header(0, 0, 0, 1),  # an emptied DATA frame alone is not worth a parse
    ]


def test_a_small_read_with_a_window_update_is_cut_and_one_without_goes_whole() -> None:
    """A read under CUT_FROM of whole frames goes to zttp as it came, unless it holds a WINDOW_UPDATE;
    a stream's update waits for zttp to parse the frames before it (the HEADERS that open its
    stream), a connection's does not."""
    small = HEADERS_1 + frame(0x0, 0x1, 1, b"x")
    assert len(small) < CUT_FROM
    assert feed(PREFACE + small, [len(PREFACE), len(small)]) == [PREFACE + small]
    read = small + update(1, 7) + PING + update(0, 0) + update(0, 8)
    assert feed(PREFACE + read, [len(PREFACE), len(read)]) == [
        PREFACE + small,
        ("window", 1, 7),
        ("window", 0, 8),
        PING + update(0, 0),
    ]


def test_without_a_window_callback_window_updates_go_to_zttp() -> None:
    data = PREFACE + update(0, 9)
    given: list[bytes] = []
    cutter = FrameCutter(lambda s, p: None, lambda: given.append(bytes(cutter.take_for_zttp())))
    cutter.feed(data)
    assert bytes(cutter.take_for_zttp()) == data and not given


def test_one_window_update_per_data_frame_sent_answers_it() -> None:
    """Per DATA frame the server sent, one WINDOW_UPDATE of the connection and one of the frame's
    stream are answers (True); more, or one for a stream the server no longer knows, are not."""
    written: list[bytes] = []
    sender = DataSender(lambda data: written.append(bytes(data)))
    sender.open(1)
    sender.open(3)
    sender.send(1, [b"a" * 10])
    sender.send(1, [b"b" * 10])
    sender.send(3, [b"c" * 10])
    assert len(written) == 3
    assert [sender.window_update(0, 10) for _ in range(4)] == [True, True, True, False]
    assert [sender.window_update(1, 10) for _ in range(3)] == [True, True, False]
    assert [sender.window_update(3, 10) for _ in range(2)] == [True, False]
    sender.close(3)
    assert sender.window_update(3, 10) is False


def test_a_body_framed_in_pieces_earns_an_answer_per_frame() -> None:
    """A body larger than the client's max frame size goes out in several DATA frames; each earns one."""
    sender = DataSender(lambda data: None)
    sender.open(1)
    sender.send(1, [b"z" * (3 * 16_384)])
    assert [sender.window_update(1, 16_384) for _ in range(4)] == [True, True, True, False]
    assert sender.window == 65_535 - 3 * 16_384  # the stream's updates leave the connection's window alone
