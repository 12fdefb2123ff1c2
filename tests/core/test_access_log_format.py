"""The access log's line format (docs/traffic.md, "Access log"): every field ``key=value``, split
on spaces; unknown figures ``-``; a name with a space, ``=`` or ``"`` JSON-quoted."""

from __future__ import annotations

import calendar
import json
import shlex

from inferd.engine.access_log import format_line

WHEN = calendar.timegm((2026, 12, 6, 2, 30, 0)) + 0.25


def test_a_line_with_every_field() -> None:
    line = format_line((WHEN, "alice", "m", "2", "grpc", "OK", 41, 902, 120, 96))
    assert line == (
        "2026-12-06T02:30:00.250000Z tenant=alice model=m version=2 protocol=grpc status=OK "
        "queue_us=41 compute_us=902 bytes_in=120 bytes_out=96\n"
    )


def test_unknown_figures_and_awkward_names() -> None:
    line = format_line((WHEN, 'team "a" = b', "", "", "http", "400", -1, -1, 7, 0))
    stamp, *fields = shlex.split(line)
    found = dict(f.split("=", 1) for f in fields)
    assert found["tenant"] == 'team "a" = b'  # shlex undoes the JSON quoting for this one
    assert json.loads(line.split("tenant=", 1)[1].split(" model=")[0]) == 'team "a" = b'
    assert (found["model"], found["version"], found["queue_us"], found["compute_us"]) == ("-", "-", "-", "-")
    assert stamp == "2026-12-06T02:30:00.250000Z" and found["status"] == "400"
