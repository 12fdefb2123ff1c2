"""The receive side of inferd's HTTP/2 protocol (``inferd.serving.h2_receive``): DATA payloads cut
out of the client's byte stream wherever its reads split it, everything else kept for zttp in
order (DATA frames emptied), and the WINDOW_UPDATEs that grant what zttp no longer sees.

The protocol itself, with these payloads, over real sockets: ``test_h2_protocol.py`` and the
tritonclient calls of ``tests/e2e/test_grpc_transport.py``."""

from __future__ import annotations

import random

import numpy as np
import pytest

from inferd.serving.h2_receive import CUT_FROM, PREFACE_BYTES, BodyBuffers, FrameCutter
from inferd.serving.h2_send import frame_header

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
assert len(PREFACE) == PREFACE_BYTES


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return frame_header(len(payload), kind, flags, stream_id) + payload


HEADERS_1 = frame(0x1, 0x4, 1, b"\x83\x86")  # END_HEADERS; the block's content is zttp's business
HEADERS_3 = frame(0x1, 0x4, 3, b"\x83\x87")
PING = frame(0x6, 0, 0, b"12345678")
PADDED = frame(0x0, 0x8, 3, b"\x03pad" + b"\0\0\0")  # PADDED: pad length 3, "pad", 3 bytes of padding
OVERSIZED = frame(0x0, 0, 3, b"o" * 16_385)  # over zttp's 16 KiB SETTINGS_MAX_FRAME_SIZE


def stream_of_frames() -> tuple[bytes, dict[int, bytes], bytes]:
    """A client's bytes; what the cutter must deliver per stream; what zttp must be given."""
    body_1 = bytes(range(256)) * 100  # 25,600 bytes: two DATA frames to cut out
    small = frame(0x0, 0, 3, b"three")  # under CUT_FROM: zttp's
    wire = [
        PREFACE,
        HEADERS_1,
        frame(0x0, 0, 1, body_1[:16_384]),
        HEADERS_3,
        PING,
        small,
        frame(0x0, 0, 1, b""),
        PADDED,
        frame(0x0, 0x1, 1, body_1[16_384:]),
        OVERSIZED,
        frame(0x0, 0x1, 3, b""),
    ]
    for_zttp = [
        PREFACE,
        HEADERS_1,
        frame_header(0, 0, 0, 1),
        HEADERS_3,
        PING,
        small,
        frame(0x0, 0, 1, b""),
        PADDED,
        frame_header(0, 0, 1, 1),
        OVERSIZED,
        frame(0x0, 0x1, 3, b""),
    ]
    return b"".join(wire), {1: body_1}, b"".join(for_zttp)


def cut(data: bytes, reads: list[int], whole: tuple[int, ...] = ()) -> tuple[dict[int, bytes], bytes]:
    """``data`` fed in ``reads``: what each stream was delivered, and all zttp was given (by ``parse`` or at the end)."""
    delivered: dict[int, bytes] = {}
    given: list[bytes] = []
    cutter = FrameCutter(
        lambda stream_id, payload: delivered.update({stream_id: delivered.get(stream_id, b"") + payload}),
        lambda: given.append(cutter.take_for_zttp()),
    )
    for stream_id in whole:
        cutter.whole(stream_id)
    pos = 0
    for size in reads:
        cutter.feed(data[pos : pos + size])
        pos += size
    assert pos == len(data)
    return delivered, b"".join([*given, cutter.take_for_zttp()])


def _reads(total: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    sizes = []
    while total:
        size = min(total, rng.choice([1, 2, 5, 9, 10, 17, 100, 4096, 20_000]))
        sizes.append(size)
        total -= size
    return sizes


@pytest.mark.parametrize("split", ["whole", "byte-by-byte", "random-1", "random-2", "random-3"])
def test_payloads_are_cut_out_wherever_reads_split_the_frames(split: str) -> None:
    """Each stream gets its DATA payloads in order; zttp gets every other byte in order, each cut-out
    DATA frame emptied (END_STREAM kept, other flags dropped), padded and oversized DATA whole."""
    data, bodies, for_zttp = stream_of_frames()
    if split == "whole":
        reads = [len(data)]
    elif split == "byte-by-byte":
        reads = [1] * len(data)
    else:
        reads = _reads(len(data), int(split[-1]))
    delivered, given = cut(data, reads)
    assert delivered == bodies
    assert given == for_zttp


def test_zttp_parses_what_comes_before_a_data_frame_first() -> None:
    """Before a DATA frame is cut out, zttp is given the frames kept before it (the HEADERS that
    open its stream, say); emptied DATA frames alone are not worth a parse."""
    events: list[object] = []
    cutter = FrameCutter(
        lambda stream_id, payload: events.append((stream_id, bytes(payload))),
        lambda: events.append(bytes(cutter.take_for_zttp())),
    )
    a, b, c = (bytes([n]) * CUT_FROM for n in b"abc")
    cutter.feed(PREFACE + HEADERS_1 + frame(0x0, 0, 1, a) + frame(0x0, 0, 1, b) + PING + frame(0x0, 0, 1, c))
    assert events == [PREFACE + HEADERS_1, (1, a), (1, b), frame_header(0, 0, 0, 1) * 2 + PING, (1, c)]


def test_a_read_with_nothing_to_cut_goes_to_zttp_as_it_came() -> None:
    """A small call (HEADERS, a DATA frame under CUT_FROM, the END_STREAM one): no parse on the
    way, and zttp gets the read itself, not a copy."""
    parses: list[None] = []
    cutter = FrameCutter(lambda stream_id, payload: None, lambda: parses.append(None))
    read = PREFACE + HEADERS_1 + frame(0x0, 0, 1, bytes(CUT_FROM - 1)) + frame(0x0, 0x1, 1, b"")
    cutter.feed(read)
    given = cutter.take_for_zttp()
    assert not parses and given == read and isinstance(given, memoryview) and given.obj is read
    read = HEADERS_3 + frame(0x0, 0x1, 3, bytes(CUT_FROM - 100))  # after the preface: the read itself
    cutter.feed(read)
    assert not parses and cutter.take_for_zttp() is read


def test_the_data_of_a_stream_marked_whole_goes_to_zttp_as_it_came() -> None:
    """A stream whose request declares a content-length (zttp checks the DATA against it): its DATA
    frames reach zttp unchanged, the other streams' are still cut out."""
    data, bodies, _ = stream_of_frames()
    for reads in ([len(data)], [1] * len(data)):
        delivered, given = cut(data, reads, whole=(1,))
        assert delivered == {}
        assert frame(0x0, 0, 1, bodies[1][:16_384]) in given and frame(0x0, 0x1, 1, bodies[1][16_384:]) in given


def test_window_updates_grant_what_was_read_past_a_quarter_of_each_window() -> None:
    """Streams get WINDOW_UPDATE once a quarter of their window was read (none after END_STREAM, none
    after a reset), the connection once a quarter of its own was; zttp grants what it parses."""
    cutter = FrameCutter(
        lambda stream_id, payload: None,
        lambda: None,
        max_frame=1 << 20,
        stream_window=40_000,
        connection_window=120_000,
    )
    cutter.feed(PREFACE + frame(0x0, 0, 1, bytes(9_999)))
    assert cutter.window_updates() == b""
    cutter.feed(frame(0x0, 0, 1, bytes(10_001)) + frame(0x0, 0, 3, bytes(15_000)) + frame(0x0, 0x1, 5, bytes(10_000)))
    assert cutter.window_updates() == b"".join(
        [
            frame(0x8, 0, 0, (45_000).to_bytes(4, "big")),
            frame(0x8, 0, 1, (20_000).to_bytes(4, "big")),
            frame(0x8, 0, 3, (15_000).to_bytes(4, "big")),
        ]
    )
    cutter.feed(frame(0x0, 0, 3, bytes(20_000)))
    cutter.forget(3)
    cutter.feed(frame(0x0, 0, 7, bytes(10_000)) + frame(0x0, 0x1, 7, bytes(15_000)))
    assert cutter.window_updates() == frame(0x8, 0, 0, (45_000).to_bytes(4, "big"))
    cutter.feed(frame(0x0, 0x8, 9, b"\x00" + bytes(31_000)) + frame(0x0, 0, 9, bytes(100)))  # padded; small
    assert cutter.window_updates() == b""


def test_large_bodies_are_joined_into_buffers_reused_only_once_nothing_holds_them() -> None:
    """A joined body is read-only and equal to its parts; its buffer is not handed out again while
    anything (a numpy array over it) holds it, and is once that goes; buffers past the pool's limit
    are not kept."""
    buffers = BodyBuffers(limit=5 << 20)
    parts = [bytes(range(256)) * 4096, b"tail"]  # 1 MiB + 4 bytes
    size = sum(len(part) for part in parts)
    first = buffers.join(parts, size)
    assert first.readonly and first == b"".join(parts)
    array = np.frombuffer(first, dtype=np.uint8)
    del first
    second = buffers.join([b"x" * size], size)
    assert second.obj is not array.base.obj
    assert array[:4].tobytes() == b"\0\1\2\3"  # the first body is intact
    kept = id(array.base.obj)
    del array
    third = buffers.join(parts, size)
    assert id(third.obj) == kept and third == b"".join(parts)
    held = [buffers.join([bytes(size)], size) for _ in range(4)]  # past 5 MiB: the last ones are not kept
    assert len({id(view.obj) for view in held}) == 4
    del held, second, third
    views = [buffers.join([bytes(size)], size) for _ in range(6)]  # the 4 kept ones and 2 new: never one twice
    assert len({id(view.obj) for view in views}) == 6
