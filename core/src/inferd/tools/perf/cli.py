"""``inferd perf``: perf_analyzer's flags, for inferd and any KServe v2 server.

Only argparse and the standard library are imported at start-up; the client libraries are
imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from inferd.tools import ToolError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``perf`` subcommand to ``inferd``'s subparsers."""
    p = sub.add_parser(
        "perf",
        help="measure throughput and latency of a model (perf_analyzer's flags)",
        description="Generate inference load on a model of a running inferd or Triton server and report "
        "throughput, latency percentiles and the server-side breakdown, as perf_analyzer does. "
        "Needs: pip install 'inferd[tools]'.",
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and server")
    g.add_argument("-m", dest="model", required=True, metavar="MODEL", help="model name (required)")
    g.add_argument(
        "-x", dest="version", default="", metavar="VERSION", help="model version (default: the server's choice)"
    )
    g.add_argument(
        "-u",
        dest="url",
        default="",
        metavar="URL",
        help="server address (default: localhost:8000 for HTTP, localhost:8001 for gRPC)",
    )
    g.add_argument(
        "-i", dest="protocol", choices=["http", "grpc"], default="http", type=str.lower, help="protocol (default: http)"
    )
    g.add_argument(
        "-H",
        dest="headers",
        action="append",
        default=[],
        metavar="HEADER:VALUE",
        help="HTTP header added to inference requests (repeatable)",
    )
    g.add_argument("--streaming", action="store_true", help="gRPC streaming API (needed for decoupled models)")
    g.add_argument(
        "-a",
        "--async",
        dest="async_mode",
        action="store_true",
        default=True,
        help="asynchronous requests (the default; the tool is asynchronous either way)",
    )
    g.add_argument(
        "--sync",
        dest="async_mode",
        action="store_false",
        help="accepted for compatibility: each of the N in-flight requests is sent after the previous one completes",
    )
    m = p.add_argument_group("measurement")
    m.add_argument(
        "--concurrency-range", default=None, metavar="START:END:STEP", help="concurrency levels (default: 1)"
    )
    m.add_argument(
        "--request-rate-range",
        default=None,
        metavar="START:END:STEP",
        help="request rates in requests/s, instead of concurrency",
    )
    m.add_argument(
        "--request-distribution",
        choices=["constant", "poisson"],
        default="constant",
        help="gaps between requests in request-rate mode (default: constant)",
    )
    m.add_argument(
        "-p",
        "--measurement-interval",
        dest="measurement_interval",
        type=int,
        default=5000,
        metavar="MS",
        help="measurement window in milliseconds (default: 5000)",
    )
    m.add_argument(
        "-s",
        "--stability-percentage",
        dest="stability_percentage",
        type=float,
        default=10.0,
        metavar="PCT",
        help="allowed max/min spread of the last 3 windows (default: 10)",
    )
    m.add_argument(
        "-r",
        "--max-trials",
        dest="max_trials",
        type=int,
        default=10,
        metavar="N",
        help="windows tried per level before reporting it unstable (default: 10)",
    )
    m.add_argument(
        "--percentile",
        type=int,
        default=None,
        metavar="P",
        help="stabilize and summarize with this latency percentile (default: the average)",
    )
    m.add_argument(
        "-l",
        "--latency-threshold",
        dest="latency_threshold",
        type=float,
        default=0.0,
        metavar="MS",
        help="stop the search when the latency exceeds this many milliseconds (default: 0, no limit)",
    )
    d = p.add_argument_group("input data")
    d.add_argument(
        "-b", dest="batch_size", type=int, default=1, metavar="N", help="batch size of each request (default: 1)"
    )
    d.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="shape of an input with variable dims, without the batch dim (repeatable)",
    )
    d.add_argument(
        "--input-data",
        default="random",
        metavar="random|zero|FILE.json",
        help="input values: random, zero, or perf_analyzer's JSON data file (default: random)",
    )
    d.add_argument(
        "--string-length", type=int, default=128, metavar="N", help="length of random BYTES elements (default: 128)"
    )
    d.add_argument("--string-data", default=None, metavar="TEXT", help="value of every BYTES element")
    d.add_argument(
        "--input-tensor-format",
        choices=["binary", "json"],
        default="binary",
        help="HTTP request tensors (default: binary)",
    )
    d.add_argument(
        "--output-tensor-format",
        choices=["binary", "json"],
        default="binary",
        help="HTTP response tensors (default: binary)",
    )
    d.add_argument(
        "--shared-memory",
        choices=["none", "system", "cuda"],
        default="none",
        help="send tensors in system shared-memory regions registered with the server (default: none; "
        "cuda is not supported yet)",
    )
    d.add_argument(
        "--output-shared-memory-size",
        type=int,
        default=102400,
        metavar="BYTES",
        help="bytes of the shared-memory region of each output (default: 102400)",
    )
    s = p.add_argument_group("sequence models")
    s.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        metavar="N",
        help="requests per sequence (default: 20, or the length of the JSON data streams)",
    )
    s.add_argument(
        "--sequence-length-variation",
        type=float,
        default=20.0,
        metavar="PCT",
        help="random +/- variation of the sequence length (default: 20)",
    )
    s.add_argument("--sequence-id-range", default="1", metavar="START[:END]", help="first sequence id (default: 1)")
    s.add_argument(
        "--num-of-sequences",
        type=int,
        default=4,
        metavar="N",
        help="concurrent sequences in request-rate mode (default: 4)",
    )
    r = p.add_argument_group("report")
    r.add_argument("-f", dest="filename", default=None, metavar="FILE.csv", help="write perf_analyzer's CSV report")
    r.add_argument(
        "--verbose-csv",
        action="store_true",
        help="add the Avg latency, request/response and response wait columns to the CSV",
    )
    r.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="draw throughput and p50/p99 latency against concurrency (or request rate) into FILE "
        "(.png, .svg or .pdf; analyze's style)",
    )
    r.add_argument("-v", dest="verbose", action="store_true", help="print every measurement window")


def options_from_args(args: argparse.Namespace) -> Any:
    from inferd.tools.perf.options import PerfOptions, parse_shape

    headers = {}
    for h in args.headers:
        key, sep, value = h.partition(":")
        if not sep or not key.strip():
            raise ToolError(f"-H expects Header:Value, got '{h}'")
        headers[key.strip()] = value.strip()
    try:
        seq_start = int(args.sequence_id_range.split(":")[0])
    except ValueError:
        raise ToolError(f"--sequence-id-range expects START[:END], got '{args.sequence_id_range}'") from None
    return PerfOptions(
        model=args.model,
        version=args.version,
        url=args.url,
        protocol=args.protocol,
        batch_size=args.batch_size,
        shapes=dict(parse_shape(s) for s in args.shape),
        input_data=args.input_data,
        string_length=args.string_length,
        string_data=args.string_data,
        measurement_interval_ms=args.measurement_interval,
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        percentile=args.percentile,
        latency_threshold_ms=args.latency_threshold,
        streaming=args.streaming,
        async_mode=args.async_mode,
        sequence_length=args.sequence_length,
        sequence_length_variation=args.sequence_length_variation,
        sequence_id_start=seq_start,
        num_of_sequences=args.num_of_sequences,
        request_distribution=args.request_distribution,
        input_tensor_format=args.input_tensor_format,
        output_tensor_format=args.output_tensor_format,
        http_headers=headers,
        verbose=args.verbose,
        shared_memory=args.shared_memory,
        output_shared_memory_size=args.output_shared_memory_size,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``inferd perf``; returns the exit status."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s", stream=sys.stderr
    )
    try:
        opts = options_from_args(args)
        if args.concurrency_range and args.request_rate_range:
            raise ToolError("give --concurrency-range or --request-rate-range, not both")
        if args.plot:  # a bad name or no matplotlib: said before the measurements, not after them
            from inferd.tools import plot

            plot.file_format(Path(args.plot))
            plot.pyplot("inferd perf --plot")
        return asyncio.run(_run(opts, args))
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _run(opts: Any, args: argparse.Namespace) -> int:
    from inferd.tools.perf import report
    from inferd.tools.perf.engine import PerfSession
    from inferd.tools.perf.options import parse_range

    if args.request_rate_range:
        levels, by_rate = parse_range(args.request_rate_range, "--request-rate-range", float), True
    else:
        levels, by_rate = parse_range(args.concurrency_range or "1", "--concurrency-range", int), False
    results = []
    async with PerfSession(opts) as session:
        assert session.info is not None and session.transport is not None
        print(report.settings_text(opts, session.info), flush=True)
        try:
            for level in levels:
                result = await (session.measure_rate(level) if by_rate else session.measure_concurrency(level))
                results.append(result)
                print(report.level_text(result, opts, session.info, session.transport.server_stats), flush=True)
                if opts.latency_threshold_ms and result.stabilizing_latency_us / 1000.0 > opts.latency_threshold_ms:
                    print(f"Measured latency went over the set limit of {opts.latency_threshold_ms:g} msec.")
                    break
        finally:
            rec = session.recorder
            print(
                f"inferd perf: {rec.completed} requests completed ({rec.responses} responses), {rec.failed} failed "
                f"(every request sent, in measurement windows or not)",
                flush=True,
            )
        print(report.summary_text(results, opts), flush=True)
        if args.filename:
            report.write_csv(
                Path(args.filename), results, opts, session.info, session.transport.server_stats, args.verbose_csv
            )
        if args.plot and results:
            report.write_plot(Path(args.plot), results, opts)
            print(f"inferd perf: plot of {len(results)} levels written to {args.plot}", flush=True)
    return 0
