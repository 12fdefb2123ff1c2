"""inferd against the real Triton 2.51 on the same ONNX models, with wrk and h2load; prints one table.

Generates ``tiny`` (ONNX Add, [b,16] FP32) and ``mlp`` (256→1024→1024→16) into a temporary
directory and serves them from two repositories: inferd's onnxruntime backend, and Triton's Python
backend running the same file with onnxruntime (the only backend in ../shared/triton). Each model is
served with and without ``dynamic_batching``. Load: ``wrk -t1`` for HTTP (binary tensor extension
and JSON), ``h2load -t1 -m1`` for gRPC, batch-1 requests, at each concurrency. inferd runs with each
``--workers`` and ``--grpc-transport`` its ``serve --help`` offers; the null stacks (uvicorn +
httptools on asyncio and uvloop, grpc.aio) give the ceilings. Every server's answer is checked
against numpy before it is timed. It prints numbers; it asserts nothing.

    .venv/bin/python benchmarks/vs_triton.py                       # the whole matrix (long)
    .venv/bin/python benchmarks/vs_triton.py --models tiny --protocols grpc --concurrency 64 --seconds 2
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from triton_bench import load, servers, table, wire
from triton_bench.models import BenchModel, generate, served_name, write_repositories

ROOT = Path(__file__).resolve().parents[1]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,mlp", help="comma-separated: tiny, mlp (default both)")
    p.add_argument("--protocols", default=",".join(wire.PROTOCOLS), help="http-binary, http-json, grpc")
    p.add_argument("--concurrency", default="1,64", help="connections, comma-separated (default 1,64)")
    p.add_argument("--batching", default="on,off", help="dynamic batching: on, off (default both)")
    p.add_argument("--servers", default="triton,inferd,null", help="triton, inferd, null (default all)")
    p.add_argument(
        "--workers", default="1,auto", help="inferd --workers values; auto: no flag, the default (default 1,auto)"
    )
    p.add_argument("--grpc-transports", default="grpcio,h2", help="inferd --grpc-transport values")
    p.add_argument("--seconds", type=int, default=5, help="length of each timed run, whole seconds (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed run before each row, s (default 1; 0: none)")
    p.add_argument("--repeat", type=int, default=2, help="timed runs per row; the table shows the median (default 2)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every server N times, in turn (each other round in reverse order); ratios are then "
        "the median of same-round ratios, so a machine whose speed drifts compares like with like "
        "(default 1)",
    )
    p.add_argument("--max-batch-size", type=int, default=64, help="max_batch_size of every model (default 64)")
    p.add_argument("--instances", type=int, default=2, help="instance_group count of every model (default 2)")
    p.add_argument("--triton-dir", type=Path, default=_default_triton_dir(), help="the reference Triton's scripts")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of inferd (e.g. `git worktree add /tmp/base <commit>`) served beside this "
        "one from the same .venv, its sources first on PYTHONPATH; its rows are labelled "
        "'inferd@base': before/after in one run",
    )
    args = p.parse_args(argv)
    allowed = {
        "models": {"tiny", "mlp"},
        "protocols": set(wire.PROTOCOLS),
        "batching": {"on", "off"},
        "servers": {"triton", "inferd", "null"},
        "grpc_transports": {"grpcio", "h2"},
    }
    for opt, choices in allowed.items():
        if bad := set(_csv(getattr(args, opt))) - choices:
            p.error(
                f"--{opt.replace('_', '-')}: unknown {', '.join(sorted(bad))} (choose from {', '.join(sorted(choices))})"
            )
    if args.baseline is not None and not (args.baseline / "core" / "src" / "inferd").is_dir():
        p.error(f"--baseline: {args.baseline} is not a checkout of inferd (no core/src/inferd)")
    if min(args.seconds, args.repeat, args.rounds) < 1 or args.warmup < 0:
        p.error("--seconds, --repeat and --rounds must be at least 1, --warmup at least 0")
    return args


def _default_triton_dir() -> Path:
    local = ROOT.parent / "shared" / "triton"
    return local if local.is_dir() else Path("/work/shared/triton")


def ensure_triton_env(triton_dir: Path) -> None:
    """Exit unless Triton's venv exists; install onnxruntime (inferd's version) into it when missing."""
    if not (triton_dir / "start.sh").is_file():
        raise SystemExit(f"no Triton reference at {triton_dir}: pass --triton-dir or --servers inferd,null")
    venv = Path(os.environ.get("TRITON_REF_VENV", Path.home() / ".cache" / "inferd-triton-ref" / "venv"))
    py = venv / "bin" / "python"
    if not py.is_file():
        raise SystemExit(f"no Triton venv at {venv}: run `bash {triton_dir / 'setup.sh'}` first (~40 s)")
    if subprocess.run([str(py), "-c", "import onnxruntime"], capture_output=True).returncode == 0:
        return
    import onnxruntime

    pin = f"onnxruntime=={onnxruntime.__version__}"
    print(
        f"Triton's venv lacks onnxruntime (its model.py files run the ONNX files with it): installing "
        f"{pin} into {venv}",
        file=sys.stderr,
    )
    for spec in (pin, "onnxruntime"):
        if subprocess.run([str(py), "-m", "pip", "install", "-q", spec]).returncode == 0:
            return
    raise SystemExit(f"could not install onnxruntime into {venv}: `{py} -m pip install onnxruntime`")


class Bench:
    """Runs every case of one server and collects the rows."""

    def __init__(self, args: argparse.Namespace, models: dict[str, BenchModel], work: Path) -> None:
        self.args, self.models, self.work = args, models, work
        self.conc = [int(c) for c in _csv(args.concurrency)]
        self.rows: list[table.Row] = []
        self._by_case: dict[table.Case, table.Row] = {}
        #: The round being run (``--rounds``): each result is filed under it too.
        self.round = 0

    def row(self, case: table.Case) -> table.Row:
        """The row of ``case``: made on first use, then gathering every round's results."""
        row = self._by_case.get(case)
        if row is None:
            row = self._by_case[case] = table.Row(case)
            self.rows.append(row)
        return row

    def cases(self, protocols: list[str], batchings: list[str]) -> Iterator[tuple[BenchModel, str, str]]:
        for model in self.models.values():
            for batching in batchings:
                for protocol in protocols:
                    yield model, batching, protocol

    def not_available(self, label: str, protocols: list[str], batchings: list[str], why: str) -> None:
        for model, batching, protocol in self.cases(protocols, batchings):
            for conc in self.conc:
                self.row(table.Case(model.name, protocol, batching, label, conc)).status = why

    def run_server(
        self, server: servers.Server, label: str, protocols: list[str], batchings: list[str], grpc_label: str = ""
    ) -> None:
        """Start ``server``, check and time each case, stop it; a server that fails to start fails its rows.

        ``grpc_label`` (default ``label``) names the server in the gRPC rows.
        """
        labels = {p: (grpc_label or label) if p == "grpc" else label for p in protocols}
        log(f"starting {server.label}")
        try:
            server.start("/v2/health/ready" if batchings != ["-"] else None)
        except RuntimeError as exc:
            for protocol in protocols:
                self.not_available(labels[protocol], [protocol], batchings, "FAILED to start (see stderr)")
            log(str(exc))
            return
        try:
            for model, batching, protocol in self.cases(protocols, batchings):
                self.run_case(server, labels[protocol], model, batching, protocol)
        finally:
            server.stop()

    def run_case(self, server: servers.Server, label: str, model: BenchModel, batching: str, protocol: str) -> None:
        null = batching == "-"
        name = "null" if null else served_name(model.name, batching == "on")
        x = model.sample_input()
        req = wire.build_request(protocol, name, x)
        port = server.grpc_port if protocol == "grpc" else server.http_port
        assert port is not None
        why, answer_bytes = wire.check(port, req, None if null else model.reference(x))
        for conc in self.conc:
            row = self.row(table.Case(model.name, protocol, batching, label, conc))
            if why:
                row.status = f"FAILED check: {why}"
                log(f"{label} {model.name} {protocol}: {row.status}")
                continue
            self.time_row(row, server, req, port, None if null else name, answer_bytes)

    def time_row(
        self, row: table.Row, server: servers.Server, req: wire.Request, port: int, model: str | None, answer_bytes: int
    ) -> None:
        """Warm up, then time ``row`` ``--repeat`` times; failed inferences come from the server's statistics."""
        run = functools.partial(load.run_h2load, answer_bytes=answer_bytes) if req.protocol == "grpc" else load.run_wrk
        conc, args = row.case.conc, self.args
        try:
            if args.warmup > 0:
                run(port, req, conc, args.warmup, self.work, None)
            for _ in range(args.repeat):
                before = servers.inference_counts(server.http_port, model) if model and server.http_port else None
                result = run(port, req, conc, args.seconds, self.work, server.pid)
                if before and before[1] >= 0:
                    failed = servers.inference_counts(server.http_port, model)[1] - before[1]
                    if failed:
                        result = load.Result(
                            result.rate,
                            result.p50_ms,
                            result.p99_ms,
                            result.errors + failed,
                            result.cpu_pct,
                            f"{failed} failed inferences",
                        )
                row.results.append(result)
                row.rounds.setdefault(self.round, []).append(result.rate)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            row.status = f"FAILED: {str(exc)[:120]}"
        else:
            row.status = "; ".join(sorted({r.note for r in row.results if r.note}))  # every round's
        latest = row.results[-1].rate if row.results else float("nan")
        log(
            f"{row.case.server} {row.case.model} {req.protocol} batching={row.case.batching} c={conc}: "
            f"{latest:,.0f} infer/s {row.status}"
        )


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


Job = Callable[[], None]


def inferd_jobs(bench: Bench, repo: Path, protocols: list[str], batchings: list[str]) -> list[Job]:
    """inferd for each requested --workers and --grpc-transport (n/a rows where the flag is missing),
    and the same again for the ``--baseline`` checkout when one is given."""
    builds: list[tuple[str, dict[str, str] | None]] = [("inferd", None)]
    if bench.args.baseline is not None:
        builds.append(("inferd@base", servers.checkout_env(bench.args.baseline)))
    return [job for name, env in builds for job in _build_jobs(bench, repo, protocols, batchings, name, env)]


def _build_jobs(
    bench: Bench, repo: Path, protocols: list[str], batchings: list[str], name: str, env: dict[str, str] | None
) -> list[Job]:
    flags = servers.inferd_flags(env)
    has_workers, has_transport = "--workers" in flags, "--grpc-transport" in flags
    http = [p for p in protocols if p != "grpc"]
    transports = _csv(bench.args.grpc_transports) if has_transport else [None]
    jobs: list[Job] = []
    for w in _csv(bench.args.workers):
        if w not in ("1", "auto") and not has_workers:
            jobs.append(
                functools.partial(bench.not_available, f"{name} w{w}", protocols, batchings, "n/a (flag not available)")
            )
            continue
        for i, transport in enumerate(transports):
            served = (http if i == 0 else []) + (["grpc"] if "grpc" in protocols else [])
            if not served:  # a second transport when no gRPC row is asked for
                continue
            grpc_label = f"{name} w{w}" + (f" grpc={transport}" if transport else "")

            def job(
                w: str = w, transport: str | None = transport, served: list[str] = served, grpc_label: str = grpc_label
            ) -> None:
                server = servers.inferd(repo, w if has_workers else None, transport, bench.work, name, env)
                bench.run_server(server, f"{name} w{w}", served, batchings, grpc_label)

            jobs.append(job)
        if not has_transport and "grpc" in protocols:
            not_available = "n/a (flag not available)"
            jobs.extend(
                functools.partial(bench.not_available, f"{name} w{w} grpc={t}", ["grpc"], batchings, not_available)
                for t in _csv(bench.args.grpc_transports)
            )
    return jobs


def null_jobs(bench: Bench, protocols: list[str]) -> list[Job]:
    """The null stacks: uvicorn + httptools (asyncio, uvloop if installed) and grpc.aio."""
    http = [p for p in protocols if p != "grpc"]
    jobs: list[Job] = []
    if http:
        for loop in ("asyncio", "uvloop"):
            label = f"null uvicorn+httptools {loop}"
            if loop == "uvloop" and not _importable("uvloop"):
                jobs.append(functools.partial(bench.not_available, label, http, ["-"], "n/a (uvloop not installed)"))
                continue
            jobs.append(
                lambda loop=loop, label=label: bench.run_server(servers.null_http(loop, bench.work), label, http, ["-"])
            )
    if "grpc" in protocols:
        jobs.append(lambda: bench.run_server(servers.null_grpc(bench.work), "null grpc.aio", ["grpc"], ["-"]))
    return jobs


def _importable(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this table, every setting spelled out."""
    opts = [
        "models",
        "protocols",
        "concurrency",
        "batching",
        "servers",
        "workers",
        "grpc_transports",
        "seconds",
        "warmup",
        "repeat",
        "rounds",
        "max_batch_size",
        "instances",
        "triton_dir",
        "baseline",
    ]
    parts = [".venv/bin/python", "benchmarks/vs_triton.py"]
    for opt in opts:
        if getattr(args, opt) is not None:
            parts += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
    return " ".join(shlex.quote(p) for p in parts)


def estimate_minutes(args: argparse.Namespace) -> float:
    """About how long the chosen matrix runs (rows times run lengths, plus server starts)."""
    protocols, chosen = _csv(args.protocols), set(_csv(args.servers))
    grpc, http = int("grpc" in protocols), len([p for p in protocols if p != "grpc"])
    per_model = len(_csv(args.batching)) * len(_csv(args.concurrency))
    rows = len(protocols) * per_model * ("triton" in chosen)
    builds = 1 + (args.baseline is not None)
    rows += (
        (http + grpc * len(_csv(args.grpc_transports)))
        * per_model
        * len(_csv(args.workers))
        * ("inferd" in chosen)
        * builds
    )
    rows += (2 * http + grpc) * len(_csv(args.concurrency)) * ("null" in chosen)
    return args.rounds * (rows * len(_csv(args.models)) * (args.warmup + args.seconds * args.repeat + 1) + 60) / 60


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    load.check_tools()
    chosen = set(_csv(args.servers))
    if "triton" in chosen:
        ensure_triton_env(args.triton_dir)
    protocols, batchings = _csv(args.protocols), _csv(args.batching)
    log(f"this matrix takes about {estimate_minutes(args):.0f} min (at most; rows not available are skipped)")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="inferd-vs-triton-") as tmp:
        work = Path(tmp)
        models = generate(_csv(args.models), work)
        cores = len(os.sched_getaffinity(0))
        threads = max(1, cores // args.instances)
        inferd_repo, triton_repo = write_repositories(models, work, args.max_batch_size, args.instances, threads)
        bench = Bench(args, models, work)
        jobs: list[Job] = []
        if "triton" in chosen:
            triton_server = functools.partial(servers.triton, triton_repo, args.triton_dir, work)
            jobs.append(lambda: bench.run_server(triton_server(), "triton", protocols, batchings))
        if "inferd" in chosen:
            jobs += inferd_jobs(bench, inferd_repo, protocols, batchings)
        if "null" in chosen:
            jobs += null_jobs(bench, protocols)
        for bench.round in range(args.rounds):
            if args.rounds > 1:
                log(f"round {bench.round + 1} of {args.rounds}")
            for job in jobs if bench.round % 2 == 0 else reversed(jobs):
                job()
    print(
        f"\ninferd vs Triton 2.51: batch-1 requests, wrk -t1 (HTTP) / h2load -t1 -m1 (gRPC); {cores} cores; "
        f"max_batch_size {args.max_batch_size}, {args.instances} instances per model"
    )
    print(table.render(bench.rows))
    print(
        table.noise_note(
            bench.rows, args.repeat, args.seconds, args.warmup, (load_before[0], os.getloadavg()[0]), args.rounds
        )
    )
    print(
        "server CPU: % of one core, the server process and all its descendants; errors: non-2xx, socket "
        "errors and failed inferences (server statistics); vs Triton: infer/s over Triton's same row "
        "(null stacks: over Triton with batching on)."
    )
    print(f"reproduce: {command_line(args)}")


if __name__ == "__main__":
    main(sys.argv[1:])
