"""``inferd analyze``: sweep a model's configuration on a running inferd (explicit model control)
and export the best configurations. Only argparse is imported at start-up."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.tools import ToolError


def _ints(flag: str) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects comma-separated integers, got '{text}'") from None
        if not values or any(v < 0 for v in values):
            raise argparse.ArgumentTypeError(f"{flag} expects non-negative integers, got '{text}'")
        return values

    return parse


def _switches(text: str) -> list[bool]:
    table = {"on": True, "true": True, "off": False, "false": False}
    try:
        return [table[v.strip().lower()] for v in text.split(",")]
    except KeyError:
        raise argparse.ArgumentTypeError(f"--dynamic-batching expects on,off (or one of them), got '{text}'") from None


def _preferred(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("none", "-", ""):
        return ()
    return tuple(_ints("--preferred-batch-sizes")(text))


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``analyze`` subcommand to ``inferd``'s subparsers."""
    p = sub.add_parser(
        "analyze",
        help="sweep a model's configuration and export the best ones (model_analyzer-style)",
        description="Load configurations of a model through the repository API of a running inferd "
        "(--model-control-mode=explicit), measure each with the perf engine, and write the best as "
        "config.pbtxt files with an HTML report. The original configuration is loaded again at the end. "
        "Needs: pip install 'inferd[tools]'.",
    )
    g = p.add_argument_group("model and server")
    g.add_argument("-m", "--model", "--profile-models", dest="model", required=True, help="model to analyze")
    g.add_argument("-u", "--url", default="", help="server address (default: localhost:8000, or :8001 for grpc)")
    g.add_argument(
        "-i",
        "--protocol",
        "--client-protocol",
        dest="protocol",
        choices=["http", "grpc"],
        default="http",
        type=str.lower,
        help="protocol (default: http)",
    )
    s = p.add_argument_group("search space")
    s.add_argument(
        "--max-batch-sizes",
        type=_ints("--max-batch-sizes"),
        default=[],
        metavar="N,N",
        help="max_batch_size values (default: the model's)",
    )
    s.add_argument(
        "--instance-counts",
        type=_ints("--instance-counts"),
        default=[1, 2],
        metavar="N,N",
        help="instance_group counts (default: 1,2)",
    )
    s.add_argument(
        "--dynamic-batching",
        type=_switches,
        default=[True, False],
        metavar="on,off",
        help="dynamic batching settings to try (default: on,off)",
    )
    s.add_argument(
        "--queue-delays-us",
        type=_ints("--queue-delays-us"),
        default=[0, 100],
        metavar="US,US",
        help="max_queue_delay_microseconds values with dynamic batching on (default: 0,100)",
    )
    s.add_argument(
        "--preferred-batch-sizes",
        type=_preferred,
        nargs="+",
        default=[()],
        metavar="none|N,N",
        help="preferred_batch_size choices, each 'none' or a comma list (default: none)",
    )
    s.add_argument(
        "--no-default-config",
        dest="include_default",
        action="store_false",
        help="do not measure the model's current configuration",
    )
    m = p.add_argument_group("measurement")
    m.add_argument(
        "--concurrency",
        type=_ints("--concurrency"),
        default=[1, 4, 16],
        metavar="N,N",
        help="client concurrencies (default: 1,4,16)",
    )
    m.add_argument(
        "--batch-sizes", type=_ints("--batch-sizes"), default=[1], metavar="N,N", help="client batch sizes (default: 1)"
    )
    m.add_argument(
        "-p",
        "--measurement-interval",
        type=int,
        default=2000,
        metavar="MS",
        help="measurement window in milliseconds (default: 2000)",
    )
    m.add_argument(
        "-r", "--max-trials", type=int, default=5, metavar="N", help="windows per level at most (default: 5)"
    )
    m.add_argument("-s", "--stability-percentage", type=float, default=10.0, metavar="PCT", help="(default: 10)")
    m.add_argument("--shape", action="append", default=[], metavar="NAME:D1,D2", help="shape of a variable input")
    m.add_argument("--input-data", default="random", metavar="random|zero|FILE.json", help="(default: random)")
    c = p.add_argument_group("constraints and output")
    c.add_argument("--latency-budget", type=float, default=None, metavar="MS", help="latency limit in milliseconds")
    c.add_argument(
        "--latency-percentile",
        type=int,
        default=99,
        metavar="P",
        help="percentile the latency budget applies to (default: 99)",
    )
    c.add_argument("--min-throughput", type=float, default=None, metavar="INFER/S", help="throughput floor")
    c.add_argument("--top-n", type=int, default=3, metavar="N", help="configurations to export (default: 3)")
    c.add_argument(
        "--export-path",
        type=Path,
        default=Path("analyze-results"),
        metavar="DIR",
        help="where config.pbtxt files, results.json and report.html go (default: ./analyze-results)",
    )
    c.add_argument("-v", dest="verbose", action="store_true", help="print every measurement window")
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``inferd analyze``; returns the exit status."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s", stream=sys.stderr
    )
    try:
        return asyncio.run(_run(args))
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _run(args: argparse.Namespace) -> int:
    from inferd.tools.analyze import export, report
    from inferd.tools.analyze.search import SearchSpace
    from inferd.tools.analyze.sweep import Constraints, Sweep, rank
    from inferd.tools.perf.options import PERCENTILES, PerfOptions, parse_shape

    report.pyplot()  # the report needs matplotlib: say so before the sweep, not after it
    opts = PerfOptions(
        model=args.model,
        url=args.url,
        protocol=args.protocol,
        shapes=dict(parse_shape(s) for s in args.shape),
        input_data=args.input_data,
        measurement_interval_ms=args.measurement_interval,
        max_trials=args.max_trials,
        stability_percentage=args.stability_percentage,
        verbose=args.verbose,
        # p50/90/95/99 are always reported; another percentile must be asked for (it then also stabilizes)
        percentile=None if args.latency_percentile in PERCENTILES else args.latency_percentile,
    )
    space = SearchSpace(
        args.max_batch_sizes,
        args.instance_counts,
        args.dynamic_batching,
        args.queue_delays_us,
        args.preferred_batch_sizes,
        args.include_default,
    )
    constraints = Constraints(args.latency_budget, args.latency_percentile, args.min_throughput)
    sweep = Sweep(
        opts, space, args.concurrency, args.batch_sizes, constraints, progress=lambda line: print(line, flush=True)
    )
    ranked = rank(await sweep.run())
    if not any(c.measurements for c in ranked):
        raise ToolError(f"no configuration of model '{args.model}' could be measured")
    args.export_path.mkdir(parents=True, exist_ok=True)
    exported = export.write_configs(args.export_path, ranked, args.top_n)
    export.write_results(args.export_path / "results.json", args.model, ranked, exported, constraints)
    html = report.render(args.model, opts, ranked, constraints, args.top_n, [str(p) for p in exported])
    (args.export_path / "report.html").write_text(html)
    _print_summary(ranked, constraints, args.top_n, args.export_path)
    return 0


def _print_summary(ranked: list[Any], constraints: Any, top_n: int, export_path: Path) -> None:
    from inferd.tools.analyze.sweep import latency_ms

    p = constraints.latency_percentile
    print(f"\nBest configurations (written under {export_path}):")
    for i, c in enumerate([c for c in ranked if c.best is not None][:top_n], start=1):
        b = c.best
        note = "" if c.meets else "  (misses the constraints)"
        print(
            f"  {i}. {c.candidate.name}: {c.candidate.describe()}; {b.result.throughput:.1f} infer/sec, "
            f"p{p} {latency_ms(b.result, p):.2f} ms at batch {b.batch_size}, concurrency {b.concurrency}{note}"
        )
    if not any(c.meets for c in ranked):
        print("  no configuration met the constraints; the best by throughput are listed")
    print(f"Report: {export_path / 'report.html'}")
