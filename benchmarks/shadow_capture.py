"""What request capture and shadow traffic cost per request (docs/traffic.md), in one run.

Starts an in-process server (no frontends) on vs_triton.py's ``tiny`` ONNX model, served as two
identical versions with ``traffic_split 1:100``, and drives the HTTP infer route's handler
(``InferEndpoint.answer``: decode, the data plane, the router, scheduling, the instance, encode)
with N concurrent callers, under five settings, interleaved over ``--rounds`` rounds in one process:

- ``off``: no capture, no shadow (the baseline);
- ``capture 0%``, ``capture 1%``, ``capture 100%``: ``--capture-config`` at that rate (JSON-lines
  files in a temporary directory, written by the capture thread);
- ``shadow 100%``: every answered request copied to version 2 and compared (no capture);
- ``access log``: ``--access-log FILE`` (one line per request, written by its thread).

For each it prints the CPU time per client request of the event loop's thread and of every other
thread (instances, the capture writer), their sum, and that sum's difference from ``off``: the
per-request cost of the setting (a 100 % shadow runs the model twice, so its cost includes a
second inference). CPU time, so a busy machine slows the run but barely moves the numbers; still,
compare only numbers of the same run.

    .venv/bin/python benchmarks/shadow_capture.py --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_bench import models, wire

from inferd.frontends.http.infer import InferEndpoint, RequestHead
from inferd.host.server import Server, ServerOptions
from inferd.serving import run

TICKS = os.sysconf("SC_CLK_TCK")


def _thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native thread id."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


async def _drive(
    endpoint: InferEndpoint, head: RequestHead, body: bytes, name: str, concurrency: int, seconds: float
) -> tuple[int, int]:
    """Requests sent and failed over ``seconds``, ``concurrency`` callers at once."""
    deadline = time.perf_counter() + seconds
    sent = failures = 0

    async def caller() -> None:
        nonlocal sent, failures
        while time.perf_counter() < deadline:
            reply = await endpoint.answer(head, body, name, "", None, "/")
            sent += 1
            failures += reply.status != 200

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return sent, failures


async def _measure(
    repo: Path, name: str, body: bytes, head: RequestHead, setting: dict[str, Any], args: argparse.Namespace
) -> dict[str, float]:
    extra: dict[str, Any] = {"allow_openai": False}
    if "capture" in setting:
        extra["capture_config"] = setting["capture"]
    if "access_log" in setting:
        extra["access_log"] = setting["access_log"]
    server = Server(
        ServerOptions([repo], allow_http=False, allow_grpc=False, allow_metrics=False, settle_gc=True, extra=extra)
    )
    await server.start()
    try:
        if setting.get("shadow"):
            await server.dataplane.set_traffic(name, None, "2:100")
        endpoint = InferEndpoint(server.dataplane)
        await _drive(endpoint, head, body, name, args.concurrency, min(0.5, args.seconds))  # warm up
        loop_id = threading.get_native_id()
        cpu_before, loop_before, wall = _thread_cpu(), time.thread_time(), time.perf_counter()
        sent, failures = await _drive(endpoint, head, body, name, args.concurrency, args.seconds)
        if server.capture is not None:  # the writer's backlog is part of the cost
            await asyncio.to_thread(server.capture.flush)
        while setting.get("shadow") and server.table.traffic.splits[name].shadow.inflight:  # type: ignore[union-attr]
            await asyncio.sleep(0.001)
        loop_cpu, wall = time.thread_time() - loop_before, time.perf_counter() - wall
        cpu_after = _thread_cpu()
        shadow = server.table.traffic.splits[name].shadow if setting.get("shadow") else None
        capture = server.capture.figures() if server.capture is not None else None
    finally:
        await server.stop()
    others = sum(cpu_after[t] - cpu_before.get(t, 0.0) for t in cpu_after if t != loop_id)
    return {
        "loop_us": loop_cpu / sent * 1e6,
        "threads_us": others / sent * 1e6,
        "rate": sent / wall,
        "failures": failures,
        "note": (
            f"{shadow.compared} compared, {shadow.dropped} dropped, {shadow.agreed} agreed" if shadow is not None
            else f"{capture['captured']} captured, {capture['dropped']} dropped" if capture is not None else ""
        ),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="per setting (default: 5)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every setting (default: 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generated = models.generate(["tiny"], root)
        models.write_repositories(generated, root, 64, 1, 1)
        repo = root / "inferd-models"
        name = models.served_name("tiny", False)
        shutil.copytree(repo / name / "1", repo / name / "2")
        config = repo / name / "config.pbtxt"
        config.write_text(
            config.read_text()
            + 'version_policy: { all: {} }\nparameters { key: "traffic_split" value: { string_value: "1:100" } }\n'
            # the shadow stays a shadow: an agreeing one would be advanced into the canary stages
            + 'parameters { key: "shadow_advance" value: { string_value: "false" } }\n'
            # and no copy is dropped: the cost of running every one (the default queue, 64, drops
            # most copies when the benchmark saturates the loop, which would hide the cost)
            + 'parameters { key: "shadow_queue" value: { string_value: "1000000" } }\n'
        )
        request = wire.build_request("http-binary", name, generated["tiny"].sample_input())
        head = RequestHead([(k.lower().encode(), v.encode()) for k, v in request.headers.items()])
        settings: list[tuple[str, dict[str, Any]]] = [("off", {})]
        for rate in (0.0, 0.01, 1.0):
            path = root / f"capture-{rate}.json"
            path.write_text(json.dumps({"dir": str(root / f"out-{rate}"), "rate": rate, "max_file_bytes": 64 << 20}))
            settings.append((f"capture {rate:.0%}", {"capture": str(path)}))
        settings.append(("shadow 100%", {"shadow": True}))
        settings.append(("access log", {"access_log": str(root / "access.log")}))
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in settings}
        for _ in range(args.rounds):  # interleaved: drift on a busy machine hits every setting alike
            for label, setting in settings:
                results[label].append(run(_measure(repo, name, request.body, head, setting, args)))
        print(f"medians of {args.rounds} rounds of {args.seconds:g} s, {args.concurrency} callers")
        print(f"{'setting':<14}{'loop CPU us/req':>17}{'other threads us/req':>22}{'total us/req':>14}"
              f"{'cost vs off':>13}{'req/s':>10}  notes (last round)")  # fmt: skip
        base = None
        for label, _ in settings:
            rounds = results[label]
            loop_us = statistics.median(r["loop_us"] for r in rounds)
            threads_us = statistics.median(r["threads_us"] for r in rounds)
            total = statistics.median(r["loop_us"] + r["threads_us"] for r in rounds)
            rate = statistics.median(r["rate"] for r in rounds)
            failures = sum(r["failures"] for r in rounds)
            base = total if base is None else base
            print(
                f"{label:<14}{loop_us:>17.1f}{threads_us:>22.1f}{total:>14.1f}{total - base:>+13.1f}"
                f"{rate:>10,.0f}  {rounds[-1]['note']}" + (f" ({failures:.0f} failed)" if failures else "")
            )


if __name__ == "__main__":
    main()
