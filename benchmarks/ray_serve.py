"""The Ray Serve path's overhead: the same KServe v2 HTTP infer request (``add_sub`` of
examples/models, JSON) against plain ``inferd serve`` and against inferd inside Ray Serve
(plugins/serve_ray: Ray's HTTP proxy, then the replica), and against an empty ASGI app in Ray Serve
(Ray's own cost), in one run, closed loop.

Prints numbers; asserts nothing. Reproduce with:

    .venv/bin/python benchmarks/ray_serve.py [--seconds 2] [--concurrency 1 4] [--replicas 1]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from inferd.testing import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps(
    {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]}
).encode()


def closed_loop(url: str, model: str, seconds: float, concurrency: int) -> list[float]:
    """Latencies (s) of ``concurrency`` clients, each one keep-alive connection, for ``seconds``."""
    host, port = url.split(":")
    latencies: list[float] = []
    errors: list[int] = []
    stop = time.perf_counter() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        path = f"/v2/models/{model}/infer"
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            connection.request("POST", path, BODY, {"content-type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                errors.append(response.status)
            latencies.append(time.perf_counter() - t0)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{len(errors)} requests failed: {errors[:5]}"
    return latencies


def report(name: str, latencies: list[float], seconds: float) -> None:
    ms = sorted(t * 1000 for t in latencies)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    print(
        f"{name:<34} {len(ms) / seconds:7.0f} req/s  mean {statistics.fmean(ms):6.2f} ms"
        f"  p50 {p(0.5):6.2f}  p99 {p(0.99):6.2f}  (n={len(ms)})",
        flush=True,
    )


def measure(name: str, url: str, args: argparse.Namespace) -> None:
    closed_loop(url, args.model, min(1.0, args.seconds), max(args.concurrency))  # warm up
    for c in args.concurrency:
        report(f"{name}, concurrency {c}", closed_loop(url, args.model, args.seconds, c), args.seconds)


class Empty:
    """An ASGI app answering every request with a fixed JSON body (Ray's path alone; an object, not
    a function: ``serve.ingress`` calls a function to build the app)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        body = b'{"outputs": []}'
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (plain inferd: --workers 1)")
    parser.add_argument("--repository", type=Path, default=ROOT / "examples" / "models")
    parser.add_argument("--model", default="add_sub")
    args = parser.parse_args()
    print(f"command: benchmarks/ray_serve.py --seconds {args.seconds:g} --concurrency "
          f"{' '.join(map(str, args.concurrency))} --replicas {args.replicas}")  # fmt: skip

    server = ServerProcess(
        [args.repository], ["--workers", "1"], log_path=Path(tempfile.gettempdir()) / "inferd-ray-bench.log"
    )
    server.start()
    try:
        measure("inferd serve (--workers 1)", server.http_url, args)
    finally:
        server.stop()

    import ray
    from inferd_serve_ray import RaySettings, application
    from ray import serve

    t0 = time.perf_counter()
    ray.init(num_cpus=args.replicas + 2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        argv = ["--model-repository", str(args.repository)]
        serve.run(application(argv, RaySettings(replicas=args.replicas)), name="inferd", route_prefix="/")
        print(f"Ray cluster and {args.replicas} replica(s) ready in {time.perf_counter() - t0:.1f} s", flush=True)
        measure(f"Ray Serve ({args.replicas} replica{'s' if args.replicas > 1 else ''})", f"127.0.0.1:{port}", args)
        serve.delete("inferd")  # Ray's own cost: the same requests answered by an ASGI app that does nothing
        serve.run(serve.deployment(max_ongoing_requests=64)(serve.ingress(Empty())()).bind(), name="empty")
        measure("Ray Serve, an empty ASGI app", f"127.0.0.1:{port}", args)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
