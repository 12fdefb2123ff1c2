"""Trace and log command-line flags (Triton's spellings), wired to the trace and logging extensions.

``--trace-config level=TIMESTAMPS --trace-config rate=1 --trace-config triton,file=/tmp/t.json``
(and the deprecated ``--trace-file`` / ``--trace-level`` / ``--trace-rate`` / ``--trace-count`` /
``--trace-log-frequency``) configure the server's :class:`~inferd.engine.trace.Tracer` at start-up; it
writes what is left of its traces at shutdown. ``--log-file``, ``--log-info``, ``--log-warning``,
``--log-error`` and ``--log-format`` are read by the command line when it sets up logging
(:func:`inferd.host.logging_settings.configure_logging`), so they hold from the first line on.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from inferd.contracts.flags import parse_bool
from inferd.contracts.hookspecs import hookimpl
from inferd.host.logging_settings import FORMATS

if TYPE_CHECKING:
    from inferd.host.server import Server


def _log_format(value: str) -> str:
    if value not in FORMATS:
        raise argparse.ArgumentTypeError(f"expected default, ISO8601 or json, got '{value}'")
    return value


def trace_items(extra: dict[str, Any]) -> list[str]:
    """``--trace-config`` values, with the deprecated single flags turned into them first."""
    items: list[str] = []
    for flag, key in (
        ("trace_file", "triton,file"),
        ("trace_rate", "rate"),
        ("trace_count", "count"),
        ("trace_log_frequency", "triton,log-frequency"),
    ):
        if extra.get(flag) is not None:
            items.append(f"{key}={extra[flag]}")
    items += [f"level={level}" for level in extra.get("trace_level") or []]
    items += list(extra.get("trace_config") or [])
    return items


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    t = parser.add_argument_group("tracing")
    t.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[MODE,]KEY=VALUE",
        help="level=OFF|TIMESTAMPS|TENSORS (repeatable), rate=N (trace every N-th request; default 1000), "
        "count=N (-1: no limit), mode=triton|opentelemetry, triton,file=PATH, "
        "triton,log-frequency=N (write every N traces to PATH.<k>; 0: at shutdown to PATH)",
    )
    t.add_argument("--trace-file", default=None, help=argparse.SUPPRESS)
    t.add_argument("--trace-level", action="append", default=[], help=argparse.SUPPRESS)
    t.add_argument("--trace-rate", default=None, help=argparse.SUPPRESS)
    t.add_argument("--trace-count", default=None, help=argparse.SUPPRESS)
    t.add_argument("--trace-log-frequency", default=None, help=argparse.SUPPRESS)
    g = parser.add_argument_group("logging")
    g.add_argument("--log-file", default="", metavar="PATH", help="write the log to PATH instead of the console")
    g.add_argument("--log-info", type=parse_bool, default=True, metavar="BOOL", help="log INFO lines (default: true)")
    g.add_argument(
        "--log-warning", type=parse_bool, default=True, metavar="BOOL", help="log WARNING lines (default: true)"
    )
    g.add_argument("--log-error", type=parse_bool, default=True, metavar="BOOL", help="log ERROR lines (default: true)")
    g.add_argument(
        "--log-format",
        type=_log_format,
        default="default",
        metavar="FORMAT",
        help="default (Triton's layout), ISO8601, or json: one JSON object per line with time, level, "
        "logger, message, request_id and model (default: default)",
    )


@hookimpl
def inferd_startup(server: Server) -> None:
    from inferd.contracts.errors import InferdError, StartupError

    items = trace_items(server.options.extra)
    if items:
        try:
            server.tracer.configure(items)
        except InferdError as exc:
            raise StartupError(exc.message) from None


@hookimpl
def inferd_shutdown(server: Server) -> None:
    server.tracer.close()
