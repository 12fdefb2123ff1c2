"""``inferd-ray-serve``: ``inferd serve``'s repository in Ray Serve replicas, on a local Ray cluster
(started here) or the one ``--address`` names, until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from inferd.api import EmbeddedServer, StartupError
from inferd_serve_ray.deployment import RaySettings, application, inferd_argv

EPILOG = (
    "Every other option is inferd serve's (--model-repository, --model-control-mode, --load-model, "
    "--backend-config, ...); the listeners' are Ray's here (--http-host, --http-port)."
)


def parser() -> argparse.ArgumentParser:
    """The command's own options; the rest are ``inferd serve``'s."""
    p = argparse.ArgumentParser(prog="inferd-ray-serve", description=__doc__, epilog=EPILOG)
    d = RaySettings()
    p.add_argument("--address", default=None, help="the Ray cluster to join (default: start a local one)")
    p.add_argument("--http-host", default="0.0.0.0", help="where Ray's HTTP proxy listens (default: 0.0.0.0)")
    p.add_argument("--http-port", type=int, default=8000, help="Ray's HTTP proxy port (default: 8000)")
    p.add_argument("--replicas", type=int, default=d.replicas, help="replicas (default: 1)")
    p.add_argument("--min-replicas", type=int, default=None, help="autoscale: fewest replicas")
    p.add_argument("--max-replicas", type=int, default=None, help="autoscale: most replicas")
    p.add_argument(
        "--target-ongoing-requests",
        type=float,
        default=d.target_ongoing_requests,
        help=f"autoscale: ongoing requests per replica Ray aims at (default: {d.target_ongoing_requests:g})",
    )
    p.add_argument(
        "--max-ongoing-requests",
        type=int,
        default=d.max_ongoing_requests,
        help=f"requests one replica takes at a time (default: {d.max_ongoing_requests})",
    )
    p.add_argument(
        "--max-models-per-replica",
        type=int,
        default=d.max_models_per_replica,
        help="multiplexed models a replica keeps loaded; the least recently used is unloaded "
        f"(default: {d.max_models_per_replica})",
    )
    p.add_argument(
        "--replica-cpus", type=float, default=d.replica_cpus, help="CPUs Ray reserves a replica (default: 1)"
    )
    p.add_argument("--name", default=d.name, help="the application's and deployment's name (default: inferd)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit status."""
    args, rest = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    served = inferd_argv(rest)
    try:
        EmbeddedServer.from_argv(served)  # a bad flag stops here, before Ray starts
    except StartupError as exc:
        print(f"inferd-ray-serve: {exc.message}", file=sys.stderr)
        return 2
    import ray

    settings = RaySettings(
        replicas=args.replicas,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_ongoing_requests=args.target_ongoing_requests,
        max_ongoing_requests=args.max_ongoing_requests,
        max_models_per_replica=args.max_models_per_replica,
        replica_cpus=args.replica_cpus,
        name=args.name,
    )
    from ray import serve

    ray.init(address=args.address)
    serve.start(http_options={"host": args.http_host, "port": args.http_port})
    serve.run(application(served, settings), name=args.name, route_prefix="/")
    print(f"inferd-ray-serve: serving at http://{args.http_host}:{args.http_port} (Ctrl-C stops)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
