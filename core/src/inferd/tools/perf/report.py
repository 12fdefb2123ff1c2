"""perf_analyzer's console report and its ``-f`` CSV file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TextIO

from inferd.tools import plot
from inferd.tools.perf.model import ModelInfo
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.profiler import LevelResult


def settings_text(opts: PerfOptions, info: ModelInfo) -> str:
    """The ``*** Measurement Settings ***`` block."""
    how = "average" if opts.percentile is None else f"p{opts.percentile}"
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {opts.batch_size}",
        "  Service Kind: TRITON",
        '  Using "time_windows" mode for stabilization',
        f"  Stabilizing using {how} latency and throughput",
        f"  Measurement window: {opts.measurement_interval_ms} msec",
    ]
    if opts.latency_threshold_ms:
        lines.append(f"  Latency limit: {opts.latency_threshold_ms:g} msec")
    if info.is_sequence:
        lines.append("  Detected sequence model: sending sequences with sequence_id/start/end")
    if info.is_decoupled:
        lines.append("  Detected decoupled model, using the first response for measuring latency")
    lines.append(f"  Using {'asynchronous' if opts.async_mode else 'synchronous'} calls for inference")
    return "\n".join(lines) + "\n"


def level_text(r: LevelResult, opts: PerfOptions, info: ModelInfo, server_stats: bool) -> str:
    """The per-level block: client side, then server side."""
    head = (
        f"Request concurrency: {r.level:g}"
        if r.mode == "concurrency"
        else f"Request Rate: {r.level:g} inference requests per seconds"
    )
    lines = [head, "  Client: "]
    lines.append(f"    Request count: {r.request_count}")
    if r.mode == "request_rate" and r.delayed:
        lines.append(f"    [WARNING] inferd perf could not keep up with the rate: {r.delayed} requests were delayed")
    lines.append(f"    Throughput: {r.throughput:.2f} infer/sec")
    if info.is_decoupled:
        lines.append(f"    Response Throughput: {r.response_throughput:.2f} infer/sec")
    if opts.percentile is None:
        lines.append(f"    Avg latency: {r.avg_latency_us:.0f} usec")
    lines += [f"    p{p} latency: {v:.0f} usec" for p, v in r.percentiles_us.items()]
    proto = "gRPC" if opts.protocol == "grpc" else "HTTP"
    io = "(un)marshal request/response" if opts.protocol == "grpc" else "send/recv"
    lines.append(
        f"    Avg {proto} time: {r.avg_request_us:.0f} usec ({io} {r.avg_send_us + r.avg_recv_us:.0f} usec + "
        f"response wait {r.response_wait_us:.0f} usec)"
    )
    lines.append(f"    Client CPU: {r.client_cpu_us_per_request:.0f} usec/request (inferd perf's own process time)")
    if not r.stable:
        lines.append(f"    [WARNING] not stable within {opts.stability_percentage:g}% after {opts.max_trials} windows")
    lines.append("  Server: ")
    lines += _server_lines(r) if server_stats else ["    (statistics not available)"]
    return "\n".join(lines) + "\n"


def _server_lines(r: LevelResult) -> list[str]:
    s = r.server
    if s.success_count == 0:
        return [f"    Request count: {s.success_count}"]
    cumm = s.avg_us("success")
    queue = s.avg_us("queue")
    parts = [s.avg_us("compute_input"), s.avg_us("compute_infer"), s.avg_us("compute_output")]
    overhead = max(0.0, cumm - queue - sum(parts))
    return [
        f"    Inference count: {s.inference_count}",
        f"    Execution count: {s.execution_count}",
        f"    Successful request count: {s.success_count}",
        f"    Avg request latency: {cumm:.0f} usec (overhead {overhead:.0f} usec + queue {queue:.0f} usec + "
        f"compute input {parts[0]:.0f} usec + compute infer {parts[1]:.0f} usec + compute output {parts[2]:.0f} usec)",
    ]


def summary_text(results: list[LevelResult], opts: PerfOptions) -> str:
    """The closing ``Inferences/Second vs. Client ... Latency`` lines."""
    how = "Average" if opts.percentile is None else f"p{opts.percentile}"
    lines = [f"Inferences/Second vs. Client {how} Batch Latency"]
    for r in results:
        head = f"Concurrency: {r.level:g}" if r.mode == "concurrency" else f"Request Rate: {r.level:g}"
        lines.append(f"{head}, throughput: {r.throughput:.2f} infer/sec, latency {r.stabilizing_latency_us:.0f} usec")
    return "\n".join(lines) + "\n"


def csv_columns(
    results: list[LevelResult], opts: PerfOptions, info: ModelInfo, server_stats: bool, verbose: bool
) -> list[str]:
    cols = ["Concurrency" if results[0].mode == "concurrency" else "Request Rate", "Inferences/Second"]
    if info.is_decoupled:
        cols.append("Response Throughput")
    cols.append("Client Send")
    if server_stats:
        cols += [
            "Network+Server Send/Recv",
            "Server Queue",
            "Server Compute Input",
            "Server Compute Infer",
            "Server Compute Output",
        ]
        if info.response_cache:
            cols += ["Server Cache Hit", "Server Cache Miss"]
    cols.append("Client Recv")
    cols += [f"p{p} latency" for p in results[0].percentiles_us]
    if verbose:
        cols += (["Avg latency"] if opts.percentile is None else []) + ["request/response", "response wait"]
    return cols


def _csv_row(r: LevelResult, opts: PerfOptions, info: ModelInfo, server_stats: bool, verbose: bool) -> list[object]:
    row: list[object] = [f"{r.level:g}", round(r.throughput, 4)]
    if info.is_decoupled:
        row.append(round(r.response_throughput, 4))
    row.append(int(r.avg_send_us))
    if server_stats:
        s = r.server
        compute = ["compute_input", "compute_infer", "compute_output"]
        accounted = (
            s.avg_us("queue") + sum(s.avg_us(c) for c in compute) + s.avg_us("cache_hit") + s.avg_us("cache_miss")
        )
        wait = r.avg_latency_us - r.avg_send_us - r.avg_recv_us
        row += [int(max(0.0, wait - accounted)), int(s.avg_us("queue"))] + [int(s.avg_us(c)) for c in compute]
        if info.response_cache:
            row += [int(s.avg_us("cache_hit")), int(s.avg_us("cache_miss"))]
    row.append(int(r.avg_recv_us))
    row += [int(v) for v in r.percentiles_us.values()]
    if verbose:
        if opts.percentile is None:
            row.append(int(r.avg_latency_us))
        row += [int(r.avg_send_us + r.avg_recv_us), int(r.response_wait_us)]
    return row


def write_csv(
    path: Path,
    results: list[LevelResult],
    opts: PerfOptions,
    info: ModelInfo,
    server_stats: bool,
    verbose: bool = False,
) -> None:
    """perf_analyzer's latency report: one row per level, sorted by increasing throughput, times in usec."""
    with open(path, "w", newline="") as f:
        _write(f, results, opts, info, server_stats, verbose)


def _write(
    f: TextIO, results: list[LevelResult], opts: PerfOptions, info: ModelInfo, server_stats: bool, verbose: bool
) -> None:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(csv_columns(results, opts, info, server_stats, verbose))
    for r in sorted(results, key=lambda r: r.throughput):
        writer.writerow(_csv_row(r, opts, info, server_stats, verbose))


#: The latency percentiles ``--plot`` draws.
PLOT_PERCENTILES = (50, 99)


def plot_panels(results: list[LevelResult], opts: PerfOptions) -> list[plot.Panel]:
    """The two charts of ``--plot``: throughput, then p50 and p99 latency (ms), against the levels."""
    by_level = sorted(results, key=lambda r: r.level)
    x_label = "concurrency" if by_level[0].mode == "concurrency" else "request rate (requests/sec)"
    against = "concurrency" if by_level[0].mode == "concurrency" else "request rate"
    tput: list[plot.Series] = [(opts.model, [(r.level, r.throughput) for r in by_level])]
    latency: list[plot.Series] = [
        (f"p{p}", [(r.level, r.percentiles_us[p] / 1000.0) for r in by_level]) for p in PLOT_PERCENTILES
    ]
    return [
        (tput, f"{opts.model}: throughput vs {against}", x_label, "throughput (infer/sec)"),
        (latency, f"{opts.model}: latency vs {against}", x_label, "latency (ms)"),
    ]


def write_plot(path: Path, results: list[LevelResult], opts: PerfOptions) -> None:
    """``--plot FILE``: :func:`plot_panels` side by side, in the format of the file's suffix."""
    data = plot.figure(plot_panels(results, opts), "inferd perf --plot", plot.file_format(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
