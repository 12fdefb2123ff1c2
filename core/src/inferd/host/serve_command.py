"""``inferd serve`` (Triton's flag spellings) and ``inferd plugins``: the full command line, with every
plugin's options; :mod:`inferd.host.cli` runs it for every command but the tools'."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from inferd import __version__, serving
from inferd.auth import AccessControl, AuthConfigError, RestrictionError, access_from_flags
from inferd.contracts.errors import InferdError, StartupError
from inferd.contracts.flags import parse_bool
from inferd.engine.rate_limiter import parse_resource
from inferd.frontends.header_forward import pattern_option
from inferd.host import triton_flags
from inferd.host.arguments import SuggestingParser, backend_config_setting
from inferd.host.logging_settings import configure_logging
from inferd.host.plugins import PluginHost
from inferd.host.server import Server, ServerOptions
from inferd.lifecycle.budget import parse_budget
from inferd.lifecycle.device_budget import parse_device_budgets
from inferd.lifecycle.manager import ControlMode
from inferd.serving import HTTP_HEADER_TIMEOUT, HTTP_MAX_HEADER_SIZE, HTTP_MAX_INPUT_SIZE, tls
from inferd.tools import COMMANDS, command
from inferd.workers import auto
from inferd.workers.peers import WorkerSlot
from inferd.workers.supervisor import HEALTH_TIMEOUT_S, Supervisor, hold_port

log = logging.getLogger("inferd.host.cli")

_SETTING = re.compile(r"\s*[A-Za-z_][\w.-]*\s*=")


def _cache_settings(value: str) -> list[tuple[str, str, str]]:
    """``<cache_name>,<setting>=<value>`` (Triton's format: the value may hold commas).

    As a shorthand, ``<cache_name>,a=1,b=2`` sets several settings when every comma-separated part
    after the name is a ``setting=value`` pair.
    """
    name, comma, rest = value.partition(",")
    parts = rest.split(",")
    if not all(_SETTING.match(p) for p in parts):
        parts = [rest]
    out = []
    for part in parts:
        setting, eq, setting_value = part.partition("=")
        if not name.strip() or not comma or not setting.strip() or not eq or not setting_value:
            raise argparse.ArgumentTypeError(
                f"expected <cache_name>,<setting>=<value> (e.g. local,size=1048576), got '{value}'"
            )
        out.append((name.strip(), setting.strip(), setting_value))
    return out


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got '{value}'")
    return number


def _workers(value: str) -> int | str:
    return auto.AUTO if value.strip().lower() == auto.AUTO else _positive(value)


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got '{value}'")
    return number


def _positive_seconds(value: str) -> float:
    number = _seconds(value)
    if not 0 < number < 1e9:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got '{value}'")
    return number


def _add_serve(sub: argparse._SubParsersAction, host: PluginHost) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model repository over HTTP and gRPC",
        description="Serve one or more Triton-layout model repositories over KServe v2 HTTP and gRPC.",
    )
    g = p.add_argument_group("models")
    g.add_argument(
        "--model-repository",
        "--model-store",
        dest="model_repository",
        action="append",
        required=True,
        metavar="PATH",
        help="model repository: a directory or s3://[host:port/]bucket/path (repeat for several)",
    )
    g.add_argument(
        "--model-control-mode",
        choices=[m.value for m in ControlMode],
        default="none",
        help="none: load everything at start; explicit: load with --load-model and the "
        "repository API; poll: also watch the repository and apply changes (default: none)",
    )
    g.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        metavar="SECS",
        help="poll mode: rescan interval; file-system events trigger a rescan sooner (default: 15)",
    )
    g.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="explicit mode: model to load at start-up; '*' loads all (repeatable)",
    )
    g.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not let backends complete missing config fields from the model files",
    )
    g.add_argument(
        "--strict-model-config",
        type=parse_bool,
        default=None,
        metavar="BOOL",
        help="deprecated Triton spelling: true is --disable-auto-complete-config",
    )
    g.add_argument(
        "--model-config-name",
        default=None,
        metavar="NAME",
        help="use <model>/configs/NAME.pbtxt where present instead of config.pbtxt",
    )
    g.add_argument(
        "--model-namespacing",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="key models by repository and name: the same name may be in several repositories, "
        "each ensemble calls its own repository's models first, and a request for a name "
        "found more than once is refused (default: false)",
    )
    g.add_argument(
        "--model-load-thread-count", type=int, default=4, metavar="N", help="models loaded in parallel (default: 4)"
    )
    g.add_argument(
        "--model-unload-timeout-secs",
        type=_seconds,
        default=30.0,
        metavar="SECS",
        help="how long an unload (or a reload's retiring version) waits for in-flight requests; "
        "past it, instances still executing are abandoned (their requests fail with "
        "UNAVAILABLE, their threads are left running) and the model unloads (default: 30)",
    )
    g.add_argument(
        "--model-load-on-demand",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="load a model of the repositories on its first request (concurrent requests wait for the "
        "same load); start-up loads only --load-model names and pinned models (default: false)",
    )
    g.add_argument(
        "--model-load-on-demand-timeout-secs",
        type=_seconds,
        default=60.0,
        metavar="SECS",
        help="how long a request waits for its model's load on demand (and the load for room under the "
        "budget); past it, 503/UNAVAILABLE with Retry-After (default: 60)",
    )
    g.add_argument(
        "--model-load-nice",
        type=int,
        default=10,
        metavar="N",
        help="how much lower (a nice value, 0-19) the threads of loads on demand and evictions run than "
        "those answering requests, so they take little CPU from warm requests; Linux, "
        "where the process may restore priorities (root, CAP_SYS_NICE, RLIMIT_NICE); 0: the same (default: 10)",
    )
    g.add_argument(
        "--model-load-on-demand-concurrency",
        type=int,
        default=0,
        metavar="N",
        help="loads on demand of models whose footprint is known (reloads after an eviction) that may run "
        "together; a first load, which measures its footprint, runs alone (default: 0, the cores from 2 to 8)",
    )
    g.add_argument(
        "--model-memory-budget",
        default=None,
        metavar="SIZE",
        help="with --model-load-on-demand: resident memory the loaded models may hold, in bytes (8G, "
        "512MiB) or as a share of the machine's or cgroup's memory (0.5, 50%%); idle models are "
        "evicted, least recently used first, to stay under it (with --workers N, each worker gets 1/N)",
    )
    g.add_argument(
        "--model-device-memory-budget",
        action="append",
        default=[],
        metavar="DEVICE=SIZE",
        help="with --model-load-on-demand: memory the loaded models may hold on a device, as their backends "
        "report it (repeatable: cuda:0=20GiB, or a share of the device's memory where nvidia-smi reports it: "
        "cuda:0=0.8); idle models holding memory there are evicted, least recently used first, to stay under "
        "it (with --workers N, each worker gets 1/N)",
    )
    g.add_argument(
        "--model-pin",
        action="append",
        default=[],
        metavar="NAME",
        help="a model never evicted under --model-memory-budget (repeatable; a config can say so with "
        'parameters { key: "pin" value { string_value: "true" } })',
    )
    g.add_argument(
        "--strict-readiness",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="ready only while every model that should be loaded is READY: every model of the "
        "repositories (modes none, poll) or those loaded by --load-model and the repository "
        "API (explicit); a model that appears under poll later does not count (its failure is "
        "a WARNING and its reason is in the index); false: ready once started (default: true)",
    )
    g.add_argument(
        "--exit-on-error",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="exit (code 1) when a model fails to load at start-up: in modes none and poll any "
        "model, with --load-model those named (default: true)",
    )
    g.add_argument(
        "--backend-config",
        action="append",
        default=[],
        type=backend_config_setting,
        metavar="[BACKEND,]KEY=VALUE",
        help="a backend setting, e.g. onnxruntime,default-max-batch-size=8, "
        "onnxruntime,enable-global-threadpool=1, pytorch,intra_op_thread_count=4; without "
        "BACKEND it applies to every backend (repeatable; see docs/configuration.md)",
    )
    n = p.add_argument_group("network")
    n.add_argument("--http-port", type=int, default=8000, help="HTTP port (default: 8000)")
    n.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default: 8001)")
    n.add_argument("--metrics-port", type=int, default=8002, help="metrics port (default: 8002)")
    n.add_argument(
        "--http-address",
        "--address",
        dest="host",
        default="0.0.0.0",
        help="address the HTTP server binds, and gRPC unless --grpc-address (default: 0.0.0.0)",
    )
    n.add_argument(
        "--grpc-address",
        default=None,
        metavar="ADDRESS",
        help="address the gRPC server binds (default: the --http-address)",
    )
    n.add_argument("--allow-http", type=parse_bool, default=True, metavar="BOOL", help="serve HTTP (default: true)")
    n.add_argument("--allow-grpc", type=parse_bool, default=True, metavar="BOOL", help="serve gRPC (default: true)")
    n.add_argument(
        "--allow-metrics", type=parse_bool, default=True, metavar="BOOL", help="serve metrics (default: true)"
    )
    n.add_argument(
        "--http-header-forward-pattern",
        type=pattern_option,
        default=None,
        metavar="REGEX",
        help="HTTP infer request headers whose names match REGEX (searched, case-insensitive unless it "
        "starts with (?-i)) reach the model as string request parameters, as Triton forwards them",
    )
    c = p.add_argument_group("response cache")
    c.add_argument(
        "--cache-config",
        action="append",
        default=[],
        type=_cache_settings,
        metavar="NAME,KEY=VALUE",
        help="response cache and one of its settings, e.g. local,size=1048576 or "
        "redis,host=127.0.0.1 (repeatable; models opt in with response_cache { enable: true })",
    )
    c.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="deprecated Triton spelling of --cache-config local,size=BYTES (not with --cache-config)",
    )
    c.add_argument(
        "--cache-directory",
        "--cache-dir",
        dest="cache_directory",
        default=None,
        metavar="PATH",
        help="accepted for Triton compatibility and ignored: caches are plugins, not shared libraries",
    )
    o = p.add_argument_group("process")
    o.add_argument(
        "--id",
        dest="server_id",
        default="inferd",
        metavar="NAME",
        help="the server's name in server metadata (default: inferd)",
    )
    o.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        metavar="SECS",
        help="on shutdown, how long in-flight requests may take to finish (default: 30)",
    )
    o.add_argument(
        "--drain-delay-secs",
        type=_seconds,
        default=0.0,
        metavar="SECS",
        help="on shutdown, keep serving this long after readiness turned false (default: 0)",
    )
    o.add_argument("--log-verbose", type=int, default=0, metavar="LEVEL", help="verbose logging level (default: 0)")
    o.add_argument(
        "--ports-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="once serving, write the ports the frontends listen on to PATH as JSON, e.g. "
        '{"http": 8000, "grpc": 8001, "metrics": 8002}; with port 0 the system picks '
        "free ones (for tests and scripts)",
    )
    o.add_argument(
        "--status-plots-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the status page (GET /) links to the .png, .svg and .pdf plots in DIR, newest first, "
        "e.g. those of inferd perf --plot DIR/NAME.svg (default: none)",
    )
    o.add_argument(
        "--workers",
        type=_workers,
        default=auto.AUTO,
        metavar="N|auto",
        help="serving processes sharing the HTTP, gRPC and metrics ports; each holds its own "
        "model instances. auto (the default): one per usable core, or one where a model must not "
        "be loaded once per process (an LLM engine, GPU instances, sequence batching); the "
        "start-up block says which and why",
    )
    o.add_argument(
        "--worker-health-timeout",
        type=_seconds,
        default=HEALTH_TIMEOUT_S,
        metavar="SECS",
        help="with --workers N: a worker whose event loop does not answer the supervisor for this "
        f"long is killed and restarted; 0: never (default: {HEALTH_TIMEOUT_S:g})",
    )
    o.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)  # set by the supervisor
    o.add_argument("--workers-chosen", default="", help=argparse.SUPPRESS)  # auto's reason, for the block
    o.add_argument("--worker-dir", type=Path, default=None, help=argparse.SUPPRESS)
    _add_access(p)
    tls.add_arguments(p)
    _add_limits(p)
    host.add_options(p)
    triton_flags.add_arguments(p)


def _add_access(p: argparse.ArgumentParser) -> None:
    """Triton's restricted API groups and inferd's API keys (``inferd.auth``)."""
    a = p.add_argument_group("access", "restricted API groups (Triton's) and API keys with tenants (docs/security.md)")
    a.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<API>[,<API>...]:<KEY>=<VALUE>",
        help="HTTP requests to these API groups must carry header KEY: VALUE (repeatable; groups: "
        "health, metadata, inference, shared-memory, model-config, model-repository, "
        "statistics, trace, logging)",
    )
    a.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<API>[,<API>...]:<KEY>=<VALUE>",
        help="gRPC calls to these API groups must carry metadata triton-grpc-protocol-KEY: VALUE",
    )
    a.add_argument(
        "--auth-config",
        default=None,
        metavar="FILE",
        help="API keys (sha256) -> tenants, each with its models, API groups and limits (YAML or "
        "JSON; re-read when it changes); requests then need 'Authorization: Bearer <key>'",
    )
    a.add_argument(
        "--capture-config",
        default=None,
        metavar="FILE",
        help="capture a sampled share of requests and their answers to rotating JSON-lines files "
        "(YAML or JSON: dir, rate, models, tensors, max_file_bytes, max_files, redact, tenants; "
        "docs/traffic.md); 'inferd replay' sends them again",
    )
    a.add_argument(
        "--server-timing",
        action="store_true",
        help="time every inference request as if it asked '\"timing\": true': its queue and compute "
        "times in its response parameters, a Server-Timing header (HTTP) or trailing metadata (gRPC)",
    )
    a.add_argument(
        "--access-log",
        default=None,
        metavar="FILE|-",
        help="write one line per inference request (time, tenant, model, version, protocol, status, "
        "queue and compute microseconds, bytes in and out) to FILE (appended), or '-' for standard "
        "output; off by default (docs/traffic.md)",
    )
    a.add_argument(
        "--allow-client-shm",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="clients may register and unregister system and CUDA shared-memory regions; false: "
        "those calls are refused (501 / UNIMPLEMENTED), as Triton 2.69+ does by default. "
        "(default: true, as Triton 2.51)",
    )


def _rate_limit_resource(value: str) -> tuple[str, int, int]:
    try:
        return parse_resource(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_limits(p: argparse.ArgumentParser) -> None:
    """Triton's rate limiter and the HTTP request size limit."""
    r = p.add_argument_group("limits")
    r.add_argument(
        "--rate-limit",
        choices=["off", "execution_count"],
        default="off",
        help="execution_count: an instance runs only when the resources its instance_group.rate_limiter "
        "names are free (shared by every model), in priority order; off: run as soon as an "
        "instance is free (default: off)",
    )
    r.add_argument(
        "--rate-limit-resource",
        action="append",
        default=[],
        type=_rate_limit_resource,
        metavar="NAME:COUNT[:DEVICE]",
        help="units of a rate-limiter resource (on DEVICE, else on every device; a resource a model "
        "marks global has one pool); default: the most any loaded instance asks for (repeatable)",
    )
    r.add_argument(
        "--http-max-input-size",
        type=_positive,
        default=HTTP_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest HTTP request body; a larger one is refused with 400 before it is read "
        f"(default: {HTTP_MAX_INPUT_SIZE}, 64 MiB, as Triton)",
    )
    r.add_argument(
        "--http-max-header-size",
        type=_positive,
        default=HTTP_MAX_HEADER_SIZE,
        metavar="BYTES",
        help="largest HTTP request head (request line and headers); a larger one is answered 431 and "
        f"its connection closed (default: {HTTP_MAX_HEADER_SIZE}, 100 KiB)",
    )
    r.add_argument(
        "--http-header-timeout-secs",
        type=_positive_seconds,
        default=HTTP_HEADER_TIMEOUT,
        metavar="SECS",
        help="an HTTP connection whose request head takes longer to arrive (from the connection's "
        "opening, or the head's first byte), or whose request body stops for that long, is closed "
        f"(default: {HTTP_HEADER_TIMEOUT:g})",
    )


def build_parser(host: PluginHost) -> argparse.ArgumentParser:
    """``inferd`` and its commands; a mistyped option is answered with the closest one (exit code 2)."""
    parser = SuggestingParser(prog="inferd", description="A Triton-compatible inference server.")
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub, host)
    sub.add_parser("plugins", help="list discovered plugins and what they register")
    for name in COMMANDS:
        command(name).add_parser(sub)
    return parser


_OWN_DESTS = {
    "command",
    "model_repository",
    "model_control_mode",
    "repository_poll_secs",
    "load_model",
    "disable_auto_complete_config",
    "strict_model_config",
    "model_config_name",
    "model_load_thread_count",
    "model_unload_timeout_secs",
    "model_namespacing",
    "model_load_on_demand",
    "model_load_on_demand_timeout_secs",
    "model_load_on_demand_concurrency",
    "model_load_nice",
    "model_memory_budget",
    "model_device_memory_budget",
    "model_pin",
    "http_port",
    "grpc_port",
    "metrics_port",
    "host",
    "allow_http",
    "allow_grpc",
    "allow_metrics",
    "exit_timeout_secs",
    "drain_delay_secs",
    "log_verbose",
    "cache_config",
    "response_cache_byte_size",
    "cache_directory",
    "workers",
    "workers_chosen",
    "worker_index",
    "worker_dir",
    "worker_health_timeout",
    "ports_file",
    "status_plots_dir",
    "strict_readiness",
    "exit_on_error",
    "backend_config",
    "server_id",
    "http_restricted_api",
    "grpc_restricted_protocol",
    "auth_config",
    "allow_client_shm",
    "rate_limit",
    "rate_limit_resource",
}


def _cache_config(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """Group ``--cache-config`` settings by cache name (later repeats of a setting win)."""
    configs: dict[str, dict[str, str]] = {}
    byte_size = args.response_cache_byte_size
    if byte_size is not None and args.cache_config:
        raise SystemExit(
            "error: Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    if byte_size is not None and byte_size > 0:
        configs.setdefault("local", {})["size"] = str(byte_size)
    for settings in args.cache_config:
        for name, setting, value in settings:
            configs.setdefault(name, {})[setting] = value
    if args.cache_directory is not None:
        logging.getLogger(__name__).info(
            "--cache-directory %s is ignored: inferd caches are plugins (see 'inferd plugins')", args.cache_directory
        )
    return configs


def _backend_config(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """``--backend-config`` settings by backend name, ``""`` for those given without one (later
    repeats of a setting win)."""
    configs: dict[str, dict[str, str]] = {}
    for backend, setting, value in args.backend_config:
        configs.setdefault(backend, {})[setting] = value
    return configs


def _budget(text: str | None) -> int | None:
    """``--model-memory-budget`` in bytes (a share of the memory resolved here)."""
    if text is None:
        return None
    try:
        return parse_budget(text)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _device_budgets(texts: list[str]) -> dict[str, int]:
    """``--model-device-memory-budget`` in bytes by device (shares resolved here)."""
    try:
        return parse_device_budgets(texts)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    autocomplete = not args.disable_auto_complete_config and not args.strict_model_config
    return ServerOptions(
        model_repositories=list(args.model_repository),  # as given: with namespacing, each one's namespace
        model_control_mode=ControlMode(args.model_control_mode),
        repository_poll_secs=args.repository_poll_secs,
        load_models=args.load_model,
        autocomplete=autocomplete,
        model_config_name=args.model_config_name,
        model_namespacing=args.model_namespacing,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        allow_http=args.allow_http,
        allow_grpc=args.allow_grpc,
        allow_metrics=args.allow_metrics,
        exit_timeout_secs=args.exit_timeout_secs,
        drain_delay_secs=args.drain_delay_secs,
        model_load_thread_count=args.model_load_thread_count,
        model_unload_timeout_secs=args.model_unload_timeout_secs,
        model_load_on_demand=args.model_load_on_demand,
        model_load_on_demand_timeout_secs=args.model_load_on_demand_timeout_secs,
        model_load_on_demand_concurrency=args.model_load_on_demand_concurrency,
        model_load_nice=args.model_load_nice,
        model_memory_budget=_budget(args.model_memory_budget),
        model_device_memory_budget=_device_budgets(args.model_device_memory_budget),
        model_pin=list(args.model_pin),
        log_verbose=args.log_verbose,
        cache_config=_cache_config(args),
        backend_config=_backend_config(args),
        strict_readiness=args.strict_readiness,
        allow_client_shm=args.allow_client_shm,
        exit_on_error=args.exit_on_error,
        server_id=args.server_id,
        rate_limit=args.rate_limit,
        rate_limit_resources=list(args.rate_limit_resource),
        settle_gc=True,
        ports_file=args.ports_file,
        status_plots_dir=args.status_plots_dir,
        worker=WorkerSlot(args.worker_index, args.workers, args.worker_dir) if args.worker_index is not None else None,
        workers_note=_workers_note(args),
        extra={k: v for k, v in vars(args).items() if k not in _OWN_DESTS and not triton_flags.is_own_dest(k)},
    )


#: What stops the server cleanly (drain, unload): Ctrl-C, a service manager, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def _serve(server: Server) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    await server.serve(stop)
    if not server.drained:  # as Triton: past --exit-timeout-secs, do not wait for executions still running
        log.error("failed to stop server: Internal - Exit timeout expired. Exiting immediately.")
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _print_plugins(host: PluginHost) -> int:
    rows = host.plugin_infos()
    for info in rows:
        origin = f"{info.distribution} {info.version}".strip() or "(passed in)"
        regs = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(info.registers.items()))
        line = f"{info.name:<16} {origin:<32} {regs or '-'}"
        if info.error:
            line += f"  ERROR: {info.error}"
        print(line)
    return 1 if any(i.error for i in rows) else 0


def _choose_workers(args: argparse.Namespace, host: PluginHost, access: AccessControl | None) -> None:
    """``--workers auto``: set ``args.workers`` to what :mod:`inferd.workers.auto` chooses for
    the repositories, and ``args.workers_chosen`` to the start-up block's line."""
    models = auto.repository_models(
        [Path(r) if "://" not in r else r for r in args.model_repository],
        args.model_control_mode == ControlMode.EXPLICIT.value,
        args.load_model,
        args.model_config_name,
    )
    choice = auto.choose(models, host.backends, tenant_limits=access is not None and access.tenant_limits())
    args.workers = choice.count
    args.workers_chosen = choice.describe()


def _workers_note(args: argparse.Namespace) -> str:
    """The start-up block's ``workers`` line: what ``auto`` chose and why, or the count given."""
    if args.workers_chosen or args.workers == auto.AUTO:
        return str(args.workers_chosen)
    return f"{args.workers} (--workers {args.workers})"


def _supervise(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``--workers N`` (N > 1): this process runs N workers of ``inferd serve <argv>``. A port given
    as 0 is picked here and held while they run, so every worker binds the same one."""
    ports = (
        ("--http-port", args.host, args.http_port, args.allow_http),
        ("--grpc-port", args.grpc_address or args.host, args.grpc_port, args.allow_grpc),
        ("--metrics-port", getattr(args, "metrics_address", None) or args.host, args.metrics_port, args.allow_metrics),
    )
    held = [(flag, hold_port(host)) for flag, host, port, allowed in ports if port == 0 and allowed]
    picked = [part for flag, sock in held for part in (flag, str(sock.getsockname()[1]))]
    try:
        grace = args.exit_timeout_secs + args.drain_delay_secs
        chosen = ["--workers", str(args.workers), "--workers-chosen", _workers_note(args)]
        return Supervisor([*argv, *picked, *chosen], args.workers, grace, args.worker_health_timeout).run()
    finally:
        for _, sock in held:
            sock.close()


def _run_serve(args: argparse.Namespace, host: PluginHost, argv: Sequence[str]) -> int:
    """``inferd serve``: refuse what cannot be honoured, warn about what does not apply, serve."""
    refused = tls.refusal(vars(args))
    if refused is not None:
        print(f"inferd serve: error: {refused}", file=sys.stderr)
        return 2
    try:  # Triton's line layout; --log-file / --log-info / ... come from the diagnostics plugin
        configure_logging(vars(args))
    except InferdError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    if args.worker_index is None:  # once per command line, not once per worker
        for line in [*triton_flags.warnings(vars(args)), *tls.warnings(vars(args))]:
            log.warning("%s", line)
    try:  # a bad value or key file stops the start, naming the flag or the file and line
        access = access_from_flags(args.http_restricted_api, args.grpc_restricted_protocol, args.auth_config)
    except (RestrictionError, AuthConfigError) as exc:
        print(f"inferd serve: error: {exc}", file=sys.stderr)
        return 2
    if args.worker_index is None and args.workers == auto.AUTO:
        _choose_workers(args, host, access)
    try:  # what the server and its plugins cannot start with: the one place it becomes an exit status
        if args.workers > 1 and args.worker_index is None:
            return _supervise(args, argv)
        serving.run(_serve(Server(options_from_args(args), host=host, access=access)))
    except StartupError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str]) -> int:
    """``inferd ARGV`` with the full command line: ``serve``, ``plugins``, ``--help``, a mistyped command
    (:func:`inferd.host.cli.main` runs the tool commands without it)."""
    host = PluginHost()
    args = build_parser(host).parse_args(argv)
    if args.command == "plugins":
        return _print_plugins(host)
    return _run_serve(args, host, argv)
