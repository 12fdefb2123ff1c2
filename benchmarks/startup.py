"""What one ``inferd serve`` costs until it serves: CPU (user + system) and wall time to ready.

Starts ``python -m inferd.host.cli serve`` (``inferd.cli`` in an older ``--baseline``) as the test kit's ``ServerProcess`` does (ports 0, a ports
file), ``--runs`` times in turn for each repository: an empty one, and one with a tiny Python
model (``add_sub``, in-process). "Ready" is the moment the ports file appears (every model
loaded, every frontend listening); the CPU is the server process's own utime + stime from
``/proc/PID/stat`` read at that moment, then the server is stopped. Prints the medians and the
range; asserts nothing. Like the test suite (tests/conftest.py), it compiles the checkout's sources
to bytecode first and lets the servers read it, whatever PYTHONDONTWRITEBYTECODE says.
``--importtime`` prints the 25 slowest cumulative imports of one start
(``python -X importtime``) instead.

    .venv/bin/python benchmarks/startup.py                 # ~15 s on 2 idle cores
    .venv/bin/python benchmarks/startup.py --runs 21 --repos empty
    .venv/bin/python benchmarks/startup.py --importtime
    .venv/bin/python benchmarks/startup.py --runs 15 --baseline ../main   # before/after, start by start
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from python_isolation import CONFIG, MODEL_PY, cpu_seconds  # noqa: E402 (the benchmarks folder, just added)
from triton_bench.servers import CLI  # noqa: E402


def repositories(root: Path) -> dict[str, Path]:
    empty = root / "empty"
    empty.mkdir()
    python = root / "python"
    (python / "add_sub" / "1").mkdir(parents=True)
    (python / "add_sub" / "config.pbtxt").write_text(CONFIG.format(n=4, extra=""))
    (python / "add_sub" / "1" / "model.py").write_text(MODEL_PY)
    return {"empty": empty, "python": python}


def command(repo: Path, ports: Path, python_flags: list[str] = []) -> list[str]:  # noqa: B006 (never mutated)
    return [
        sys.executable,
        *python_flags,
        "-c",
        CLI,
        "serve",
        "--http-address",
        "127.0.0.1",
        "--model-repository",
        str(repo),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--ports-file",
        str(ports),
    ]


def sources(checkout: Path) -> list[Path]:
    """The source folders of a checkout: core's and each plugin's."""
    return [checkout / "core" / "src", *sorted((checkout / "plugins").glob("*/src"))]


def start_once(
    repo: Path, ports: Path, log: Path, env: dict[str, str] | None = None, timeout: float = 60.0
) -> tuple[float, float]:
    """(CPU s, wall s) of one start until its ports file appears."""
    ports.unlink(missing_ok=True)
    began = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command(repo, ports), stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = began + timeout
        while not (ports.exists() and ports.stat().st_size):
            if proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {proc.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"inferd did not write {ports} in {timeout} s:\n{log.read_text()}")
            time.sleep(0.005)
        wall = time.monotonic() - began
        return cpu_seconds([proc.pid]), wall
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def importtime(repo: Path, ports: Path, log: Path) -> None:
    """Print the slowest cumulative imports of one start (``-X importtime``)."""
    ports.unlink(missing_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(command(repo, ports, ["-X", "importtime"]), stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while not ports.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    rows = []
    for line in log.read_text().splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line[len("import time:") :].split("|")
            rows.append((int(cumulative), name.rstrip()))
    total = sum(c for c, name in rows if not name.startswith("  "))  # one space: a top-level import
    print(f"top-level imports: {total / 1e6:.3f} s (wall, under -X importtime)")
    for cumulative, name in sorted(rows, reverse=True)[:25]:
        print(f"{cumulative / 1e3:9.1f} ms  {name.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="starts per repository (default 7)")
    parser.add_argument("--repos", default="empty,python", help="comma-separated: empty, python")
    parser.add_argument("--importtime", action="store_true", help="print the slowest imports of one start")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. a `git worktree` of main) started in turn with this one, "
        "start after start, each from its own sources (load skews both alike)",
    )
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    checkouts: dict[str, dict[str, str] | None] = {"this": None}  # None: as installed (or as PYTHONPATH says)
    if args.baseline is not None:
        checkouts = {
            name: {**os.environ, "PYTHONPATH": os.pathsep.join(str(s) for s in sources(checkout))}
            for name, checkout in (("baseline", args.baseline.resolve()), ("this", ROOT))
        }
    for src in sources(ROOT) + (sources(args.baseline) if args.baseline else []):
        compileall.compile_dir(src, quiet=1)
    with tempfile.TemporaryDirectory(prefix="inferd-startup-") as tmp:
        root = Path(tmp)
        repos = repositories(root)
        ports, log = root / "ports.json", root / "server.log"
        if args.importtime:
            importtime(repos["empty"], ports, log)
            return
        print(
            f"{'checkout':<9} {'repository':<11} {'CPU s (median)':>15} {'range':>13} "
            f"{'wall s (median)':>16} {'range':>13}"
        )
        for name in args.repos.split(","):
            results: dict[str, list[tuple[float, float]]] = {checkout: [] for checkout in checkouts}
            for _ in range(args.runs):
                for checkout, env in checkouts.items():
                    results[checkout].append(start_once(repos[name], ports, log, env))
            for checkout, runs in results.items():
                cpu, wall = [r[0] for r in runs], [r[1] for r in runs]
                print(
                    f"{checkout:<9} {name:<11} {statistics.median(cpu):>15.3f} {min(cpu):>6.2f}-{max(cpu):<6.2f}"
                    f" {statistics.median(wall):>16.3f} {min(wall):>6.2f}-{max(wall):<6.2f}"
                )


if __name__ == "__main__":
    main()
