"""``parse_json``: orjson where it gives what the standard library gives, the standard library
everywhere else (integers beyond 64 bits, what orjson refuses, every error)."""

from __future__ import annotations

import json
import math
import random

import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.http.codec import _may_hold_long_integer, parse_json


def same(a: object, b: object) -> bool:
    """Equal values of equal types, all the way down (1 and 1.0 differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)  # type: ignore[union-attr]
    return a == b


EDGES = [
    b"[18446744073709551616]", b"[18446744073709551615]", b"[-9223372036854775809]", b"[-9223372036854775808]",
    b"[9223372036854775807]", b"[123456789012345678901234567890]", b'{"priority": 18446744073709551616}',
    b"[1.0000000000000000000001]", b"[0.00000000000000000000123]", b"[1e-0000000000000000000005]",
    b"[1E+0000000000000000000005]", b"[-1234567890123456789012]", b"-1234567890123456789012",
    b'["12345678901234567890"]', b"[NaN]", b"[Infinity, -Infinity]", b"[1e400]", b'["\\ud800"]',
    b"\xef\xbb\xbf[1]", b"[-0]", b"[-0.0]", b'{"a": 1, "a": 2}', b'["\\u0000", "\xc3\xa9"]', b"[true, false, null]",
    b"  [1]  ", b"[1E2, 1e-2, -1.5E+3]",
]  # fmt: skip
BAD = [b"[1,]", b"[01]", b'["a\tb"]', b'{"a":1}x', b"[1] [2]", b'["\xff"]', b"", b"{", b"[1.]", b"[.5]"]


@pytest.mark.parametrize("body", EDGES)
def test_edge_cases_parse_as_the_standard_library_parses_them(body: bytes) -> None:
    assert same(parse_json(body, "request"), json.loads(body))


@pytest.mark.parametrize("body", BAD)
def test_bad_bodies_get_the_standard_librarys_message(body: bytes) -> None:
    with pytest.raises(ValueError) as expected:  # noqa: PT011 - whatever json.loads raises is the reference
        json.loads(body)
    with pytest.raises(InvalidArgument) as got:
        parse_json(body, "request")
    assert got.value.message.startswith("failed to parse the request JSON buffer: ")
    assert str(expected.value) in got.value.message


def _number(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(-(2**70), 2**70))  # some beyond 64 bits
    if kind == 1:
        return str(rng.randrange(-(10**6), 10**6))
    if kind == 2:
        return repr(rng.random() * 10 ** rng.randrange(-30, 30))
    if kind == 3:
        return repr(float.fromhex(f"0x1.{rng.getrandbits(52):013x}p{rng.randrange(-1000, 1000)}"))
    if kind == 4:
        return f"{rng.randrange(1, 10)}.{rng.randrange(10**25)}e{rng.choice('+-')}{rng.randrange(300)}"
    return json.dumps(str(rng.randrange(10**25)))


def test_random_documents_parse_as_the_standard_library_parses_them() -> None:
    rng = random.Random(9)
    for _ in range(2000):
        values = ",".join(_number(rng) for _ in range(rng.randrange(1, 12)))
        body = f'{{"inputs": [{{"name": "x", "data": [{values}]}}], "n": {_number(rng)}}}'.encode()
        assert same(parse_json(body, "request"), json.loads(body)), body


def test_only_integers_of_nineteen_digits_or_more_go_to_the_standard_library() -> None:
    assert _may_hold_long_integer(b"[1234567890123456789]")
    assert _may_hold_long_integer(b'{"a":-1234567890123456789}')
    assert _may_hold_long_integer(b"-1234567890123456789")
    assert not _may_hold_long_integer(b"[123456789012345678]")  # 18 digits: within 64 bits
    assert not _may_hold_long_integer(b"[0.00012339999375399202, 1.2e-0000000000000000000001]")
    assert not _may_hold_long_integer(b"[1.5E+00000000000000000000, 7]")


def test_a_body_of_float32_values_takes_the_fast_parser() -> None:
    rng = random.Random(3)
    values = [float(f"{rng.random() * 10 ** rng.randrange(-8, 3):.9g}") for _ in range(256)]
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": values}]}).encode()
    assert not _may_hold_long_integer(body)
    assert same(parse_json(body, "request"), json.loads(body))
