"""Drive a server with ``wrk -t1`` (HTTP) or ``h2load -t1 -m1`` (gRPC) and read back what they saw.

Each run also measures the server's CPU: user+system ticks of the server process and all its
descendants (Triton's Python-backend stubs, inferd's workers) from ``/proc``, over the run's wall time.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .wire import Request

MISSING_TOOLS = "needs wrk and h2load: apt-get install wrk nghttp2-client"

WRK_LUA = """
wrk.method = "POST"
{headers}
local f = assert(io.open("{body}", "rb"))
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d sockerr=%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


@dataclass(frozen=True)
class Result:
    """One timed run: throughput, latency percentiles (ms), errors seen, server CPU (% of one core)."""

    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_pct: float
    note: str = ""


def check_tools() -> None:
    """Exit with the install hint when wrk or h2load is missing."""
    missing = [t for t in ("wrk", "h2load") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"{' and '.join(missing)} not found: this benchmark {MISSING_TOOLS}")


def _tree_ticks(root: int) -> int:
    """utime+stime of ``root`` and every live descendant, in clock ticks."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every live descendant so far."""
    return _tree_ticks(root) / os.sysconf("SC_CLK_TCK")


def _timed(cmd: list[str], server_pid: int | None, seconds: float) -> tuple[str, float]:
    """Run ``cmd``; return (its output, server CPU %)."""
    t0, c0 = time.monotonic(), _tree_ticks(server_pid) if server_pid else 0
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    wall, c1 = time.monotonic() - t0, _tree_ticks(server_pid) if server_pid else 0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}")
    cpu = 100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / wall if server_pid else float("nan")
    return proc.stdout, cpu


def run_wrk(port: int, req: Request, conc: int, seconds: float, work: Path, server_pid: int | None) -> Result:
    """``wrk -t1 -cN`` POSTing ``req``'s body for ``seconds``."""
    body = work / f"wrk-{req.protocol}.bin"
    body.write_bytes(req.body)
    headers = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in req.headers.items())
    script = work / f"wrk-{req.protocol}.lua"
    script.write_text(WRK_LUA.format(headers=headers, body=body))
    url = f"http://127.0.0.1:{port}{req.path}"
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script), url]
    out, cpu = _timed(cmd, server_pid, seconds)
    m = re.search(r"BENCH requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) non2xx=(\d+) sockerr=(\d+)", out)
    if not m:
        raise RuntimeError(f"could not read wrk's output: {out[-300:]}")
    n, dur, p50, p99, non2xx, sockerr = (int(g) for g in m.groups())
    ok = n - non2xx
    note = f"{non2xx} non-2xx" if non2xx else ""
    if sockerr:
        note = ", ".join(filter(None, [note, f"{sockerr} socket errors"]))
    return Result(ok / (dur / 1e6), p50 / 1000, p99 / 1000, non2xx + sockerr, cpu, note)


def run_h2load(
    port: int, req: Request, conc: int, seconds: float, work: Path, server_pid: int | None, answer_bytes: int = 0
) -> Result:
    """``h2load -t1 -m1 -cN`` POSTing ``req``'s gRPC frame for ``seconds``; latencies from its log file.

    h2load sees HTTP status codes only. A gRPC error is a 200 with ``grpc-status`` in trailers and
    no message, so the DATA bytes h2load received, short of ``answer_bytes`` (one good answer's
    frame) per 200, count the errors; the caller adds failures from the server's statistics.
    """
    body = work / "h2load-grpc.bin"
    body.write_bytes(req.body)
    log = work / "h2load.log"
    log.unlink(missing_ok=True)
    cmd = [
        "h2load",
        "-t1",
        "-m1",
        f"-c{conc}",
        "-D",
        str(max(1, round(seconds))),
        "-d",
        str(body),
        f"--log-file={log}",
        *(a for k, v in req.headers.items() for a in ("-H", f"{k}: {v}")),
        f"http://127.0.0.1:{port}{req.path}",
    ]
    out, cpu = _timed(cmd, server_pid, seconds)
    rows = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    ok = [int(r[2]) for r in rows if r[1] == "200"]
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored", out)
    bad = len(rows) - len(ok) + (int(m.group(1)) + int(m.group(2)) if m else 0)
    data = re.search(r"traffic: .*?, .*? headers .*?, \S+ \((\d+)\) data", out)
    if answer_bytes and data and int(data.group(1)) < len(ok) * answer_bytes:
        grpc_errors = len(ok) - int(data.group(1)) // answer_bytes
        bad += grpc_errors
        ok = ok[grpc_errors:]  # which 200s were errors is unknown: count them out of the rate
    span = (max(int(r[0]) + int(r[2]) for r in rows) - min(int(r[0]) for r in rows)) / 1e6 if rows else 0.0
    if not ok or span <= 0:
        return Result(0.0, float("nan"), float("nan"), bad, cpu, "no successful requests")
    p50, p99 = (q / 1000 for q in _percentiles(ok, (50, 99)))
    return Result(len(ok) / span, p50, p99, bad, cpu, f"{bad} failed/non-200/gRPC errors" if bad else "")


def _percentiles(values: list[int], qs: tuple[int, ...]) -> list[float]:
    data = sorted(values)
    if len(data) == 1:
        return [float(data[0])] * len(qs)
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return [cuts[q - 1] for q in qs]
