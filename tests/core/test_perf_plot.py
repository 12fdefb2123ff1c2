"""``inferd perf --plot FILE``: the CLI in a subprocess against a live inferd; the SVG it writes is
read back as XML and checked against the CSV of the same run (one marker per measured level, in
the order the measurements give), the PNG by its header."""

from __future__ import annotations

import csv
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

ADD_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
FAST = ["-p", "200", "-r", "3"]
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add": {"config.pbtxt": ADD_CONFIG, "1/model.py": source("add_two")}})


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferd.host.cli", "perf", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def markers(root: ET.Element, line: str) -> list[tuple[float, float]]:
    """The (x, y) pixel positions of the markers of the line whose SVG id is ``line``."""
    groups = [g for g in root.iter(f"{SVG}g") if g.get("id") == line]
    assert len(groups) == 1, f"one line '{line}' expected, found {len(groups)}"
    return [(float(u.get("x", "nan")), float(u.get("y", "nan"))) for u in groups[0].iter(f"{SVG}use")]


def texts(root: ET.Element) -> set[str]:
    return {"".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")}


def test_svg_has_one_marker_per_level_matching_the_csv(server: ServerProcess, tmp_path: Path) -> None:
    plot, report = tmp_path / "perf.svg", tmp_path / "perf.csv"
    run = perf("-m", "add", "-u", server.http_url, "--concurrency-range", "1:3", *FAST, "--plot", str(plot),
               "-f", str(report))  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert f"plot of 3 levels written to {plot}" in run.stdout
    root = ET.fromstring(plot.read_bytes())
    assert root.tag == f"{SVG}svg"
    words = texts(root)
    for label in ("add: throughput vs concurrency", "add: latency vs concurrency", "concurrency",
                  "throughput (infer/sec)", "latency (ms)", "p50", "p99", "add"):  # fmt: skip
        assert label in words, (label, sorted(words))
    tput, p50, p99 = markers(root, "add"), markers(root, "p50"), markers(root, "p99")
    assert len(tput) == len(p50) == len(p99) == 3
    # x: concurrency 1, 2, 3, evenly spaced, the same on both charts' scale
    xs = [x for x, _ in tput]
    assert xs[0] < xs[1] < xs[2] and xs[2] - xs[1] == pytest.approx(xs[1] - xs[0], rel=1e-3)
    lat_xs = [x for x, _ in p50]
    assert [x for x, _ in p99] == lat_xs and lat_xs[2] - lat_xs[1] == pytest.approx(lat_xs[1] - lat_xs[0], rel=1e-3)
    # y (pixels grow downwards): p99 is never below p50, and the throughput ranks as the CSV's
    assert all(y99 <= y50 + 1e-6 for (_, y99), (_, y50) in zip(p99, p50, strict=True))
    with report.open(newline="") as f:
        rows = list(csv.DictReader(f))
    measured = {int(r["Concurrency"]): float(r["Inferences/Second"]) for r in rows}
    assert sorted(measured) == [1, 2, 3]
    by_csv = sorted(measured, key=lambda c: measured[c])
    by_svg = sorted([1, 2, 3], key=lambda c: -tput[c - 1][1])
    if len(set(measured.values())) == 3:
        assert by_svg == by_csv
    # the p99 of each level, measured in the CSV, orders the p99 markers the same way
    p99s = {int(r["Concurrency"]): int(r["p99 latency"]) for r in rows}
    if len(set(p99s.values())) == 3:
        assert sorted([1, 2, 3], key=lambda c: -p99[c - 1][1]) == sorted(p99s, key=lambda c: p99s[c])


def test_png_by_suffix(server: ServerProcess, tmp_path: Path) -> None:
    plot = tmp_path / "perf.png"
    run = perf("-m", "add", "-u", server.grpc_url, "-i", "grpc", "--concurrency-range", "1:2", *FAST,
               "--plot", str(plot))  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # IHDR: two charts side by side, 8 x 4.8 in at 100 dpi
    assert (width, height) == (1600, 480)


def test_request_rate_axis(server: ServerProcess, tmp_path: Path) -> None:
    plot = tmp_path / "rate.svg"
    run = perf("-m", "add", "-u", server.http_url, "--request-rate-range", "50:100:50", *FAST, "--plot", str(plot))
    assert run.returncode == 0, run.stderr + run.stdout
    root = ET.fromstring(plot.read_bytes())
    assert "request rate (requests/sec)" in texts(root)
    assert len(markers(root, "add")) == 2


def test_unknown_suffix_is_refused_before_measuring(server: ServerProcess, tmp_path: Path) -> None:
    plot = tmp_path / "perf.txt"
    run = perf("-m", "add", "-u", server.http_url, *FAST, "--plot", str(plot))
    assert run.returncode == 1
    assert run.stderr.startswith("error: --plot writes .png, .svg, .pdf files") and str(plot) in run.stderr
    assert "Measurement Settings" not in run.stdout and not plot.exists()
