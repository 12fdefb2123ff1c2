"""``inferd.lifecycle.budget``: what ``--model-memory-budget`` accepts (and refuses), and which idle
models make room for a load (least recently used first, never one that may not go)."""

from __future__ import annotations

import pytest

from inferd.lifecycle.budget import Loaded, choose_victims, parse_budget, rss_bytes, shown_bytes

GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8589934592", 8 * GIB),
        ("8G", 8 * GIB),
        ("8GiB", 8 * GIB),
        ("512MiB", 512 << 20),
        ("512m", 512 << 20),
        ("1.5G", 3 * GIB // 2),
        ("0.5", 5 * GIB),
        (".25", 10 * GIB // 4),
        ("50%", 5 * GIB),
        ("100%", 10 * GIB),
    ],
)
def test_budget_in_bytes_or_a_share_of_the_memory(text: str, expected: int) -> None:
    assert parse_budget(text, total=10 * GIB) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [("lots", "give bytes"), ("0", "more than 0 bytes"), ("150%", "at most 1"), ("-1G", "give bytes"), ("", "give")],
)
def test_a_bad_budget_says_what_to_give(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="--model-memory-budget") as error:
        parse_budget(text, total=10 * GIB)
    assert why in str(error.value)


def test_the_least_recently_used_evictable_models_make_room() -> None:
    loaded = [
        Loaded("old_busy", 40, last_used=1.0, evictable=False),
        Loaded("old", 40, last_used=2.0, evictable=True),
        Loaded("newer", 40, last_used=3.0, evictable=True),
        Loaded("newest", 40, last_used=4.0, evictable=True),
    ]
    assert choose_victims(loaded, need=0, budget=160) == []  # it fits already
    assert choose_victims(loaded, need=40, budget=160) == ["old"]  # not the older busy one
    assert choose_victims(loaded, need=80, budget=160) == ["old", "newer"]
    assert choose_victims(loaded, need=200, budget=160) is None  # even all evictable ones would not do


def test_rss_and_sizes_for_people() -> None:
    assert rss_bytes() > 1 << 20  # this interpreter
    assert [shown_bytes(n) for n in (512, 40 << 20, 136 << 20, 3 * GIB // 2)] == [
        "512 B",
        "40.0 MiB",
        "136 MiB",
        "1.5 GiB",
    ]
