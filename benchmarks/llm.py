"""inferd's vLLM backend beside vLLM's own OpenAI server: the same tiny model, the same prompts.

Output tokens per second and time to first token (p50/p99) at each concurrency, streamed. inferd is
called through its OpenAI frontend when that plugin is installed (``/v1/completions``), else through
``generate_stream``; vLLM through ``vllm serve``'s ``/v1/completions``. Prints a table; asserts
nothing. Long on a busy machine: run it on a quiet one.

TTFT is the time to the first event that carries text: ``vllm serve`` also streams events with no
text (a token that ends inside a UTF-8 character, frequent with a random model) where inferd sends
none, so "first event" would time different things; its p50 is printed too (``1st event``). Both
servers run side by side (an idle one takes no CPU) and ``--rounds`` loads them in turn, in
alternating order; each cell is the median over the rounds, with the range, and the ratio rows
compare inferd with vLLM round by round (same-round ratios: on a shared machine they drift less).

    .venv/bin/python benchmarks/llm.py [--concurrency 1 8 32] [--requests-per-client 4] [--max-tokens 64]
        [--rounds 1] [--model /path/to/hf-model]   # default: a tiny random Llama built offline
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from inferd.testing import ServerProcess
from inferd.testing.servers import free_port

ENV = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
PROMPTS = ["hello world", "the quick brown fox", "inference servers answer", "a tiny model says"]
ENGINE = {"dtype": "float32", "max_model_len": 256, "enforce_eager": True}


@dataclass
class Target:
    """One server to load: where to POST, how to build a body, how to read a streamed event."""

    name: str
    url: str
    body: Callable[[str, int], dict[str, object]]
    tokens: Callable[[dict[str, object]], int]  # output tokens an event reports (0 if none)
    text: Callable[[dict[str, object]], str]  # the text an event carries ("" if none)


def openai_target(name: str, base: str, model: str) -> Target:
    def body(prompt: str, max_tokens: int) -> dict[str, object]:
        return {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def tokens(event: dict[str, object]) -> int:
        usage = event.get("usage")
        return int(usage["completion_tokens"]) if isinstance(usage, dict) else 0

    def text(event: dict[str, object]) -> str:
        choices = event.get("choices")
        return str(choices[0].get("text") or "") if isinstance(choices, list) and choices else ""

    return Target(name, f"{base}/v1/completions", body, tokens, text)


def generate_stream_target(base: str) -> Target:
    def body(prompt: str, max_tokens: int) -> dict[str, object]:
        params = json.dumps({"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
        return {"text_input": prompt, "stream": True, "sampling_parameters": params, "return_num_output_tokens": True}

    def tokens(event: dict[str, object]) -> int:
        return int(event.get("num_output_tokens", 0))  # type: ignore[call-overload]

    def text(event: dict[str, object]) -> str:
        return str(event.get("text_output") or "")

    return Target("inferd generate_stream", f"{base}/v2/models/llm/generate_stream", body, tokens, text)


async def one_request(
    client: httpx.AsyncClient, target: Target, prompt: str, max_tokens: int
) -> tuple[float, float, int]:
    """(time to the first event with text, time to the first event, output tokens) of one streamed request."""
    start = time.perf_counter()
    first_text = first_event = None
    tokens = 0
    async with client.stream("POST", target.url, json=target.body(prompt, max_tokens)) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter() - start
            event = json.loads(line[6:])
            first_event = now if first_event is None else first_event
            if first_text is None and target.text(event):
                first_text = now
            tokens += target.tokens(event)
    return first_text or first_event or 0.0, first_event or 0.0, tokens


async def load(target: Target, concurrency: int, per_client: int, max_tokens: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        await one_request(client, target, PROMPTS[0], 4)  # warm up

        async def worker(i: int) -> list[tuple[float, float, int]]:
            return [
                await one_request(client, target, PROMPTS[(i + k) % len(PROMPTS)], max_tokens)
                for k in range(per_client)
            ]

        start = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(worker(i) for i in range(concurrency))) for r in rs]
        wall = time.perf_counter() - start
    ttft = sorted(r[0] * 1000 for r in results)
    return {
        "tok_s": sum(r[2] for r in results) / wall,
        "ttft_p50": statistics.median(ttft),
        "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
        "event_p50": statistics.median(r[1] * 1000 for r in results),
    }


def start_inferd(
    model: Path, workdir: Path, **engine: object
) -> tuple[ServerProcess | subprocess.Popen[bytes], Target]:
    """inferd serving ``model`` with the vLLM backend (``engine``: more model.json keys)."""
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    repo = write_vllm_repository(workdir / "repo", model, **{**ENGINE, **engine})
    if importlib.util.find_spec("inferd_frontend_openai") is None:
        server = ServerProcess([repo], env=ENV).start(timeout=600)
        return server, generate_stream_target(f"http://{server.http_url}")
    port = free_port()
    server = ServerProcess([repo], args=["--openai-port", str(port), "--openai-address", "127.0.0.1"], env=ENV)
    server.start(timeout=600)
    return server, openai_target("inferd openai", f"http://127.0.0.1:{port}", "llm")


def start_vllm(model: Path, workdir: Path, *args: str) -> tuple[subprocess.Popen[bytes], Target]:
    """``vllm serve`` on ``model`` (``args``: more of its flags)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--served-model-name",
        "llm",
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
        *args,
    ]
    log = open(workdir / "vllm-serve.log", "wb")  # noqa: SIM115 - vllm writes to it for as long as it runs
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **ENV})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}; see {workdir / 'vllm-serve.log'}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return proc, openai_target("vllm serve", base, "llm")
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError("vllm serve did not become healthy in 600 s")


def stop(handle: ServerProcess | subprocess.Popen[bytes]) -> None:
    if isinstance(handle, ServerProcess):
        handle.stop()
    else:
        handle.terminate()
        handle.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1, help="load each server this many times, in turn")
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: a tiny random Llama)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferd-llm-bench-") as tmp:
        workdir = Path(tmp)
        if args.model is None:
            from inferd_backend_vllm.tiny_model import build_tiny_llama

            args.model = build_tiny_llama(workdir / "tiny-llama")
        servers = []
        try:
            for start in (start_inferd, start_vllm):
                servers.append(start(args.model, workdir))  # noqa: PERF401 - one by one: `finally` stops those started
            targets = [target for _, target in servers]
            runs = measure(targets, args.concurrency, args.rounds, args.requests_per_client, args.max_tokens)
        finally:
            for handle, _ in servers:
                stop(handle)
    report(runs, [t.name for t in targets], args.concurrency)


Runs = dict[tuple[str, int], list[dict[str, float]]]


def measure(targets: list[Target], concurrency: list[int], rounds: int, per_client: int, max_tokens: int) -> Runs:
    """Each target's results at each concurrency, one per round; the order of the targets alternates."""
    runs: Runs = {(t.name, c): [] for t in targets for c in concurrency}
    for r in range(rounds):
        for c in concurrency:
            for target in targets if r % 2 == 0 else targets[::-1]:
                runs[(target.name, c)].append(asyncio.run(load(target, c, per_client, max_tokens)))
    return runs


def _cell(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:.1f}" if len(values) == 1 else f"{median:.1f} [{min(values):.0f}-{max(values):.0f}]"


def report(runs: Runs, names: list[str], concurrency: list[int]) -> None:
    """Medians (and ranges, over several rounds) per server and concurrency, then inferd/vLLM ratios."""
    keys = (("tok_s", "tok/s"), ("ttft_p50", "TTFT p50 ms"), ("ttft_p99", "TTFT p99 ms"), ("event_p50", "1st event ms"))
    width = 18 if any(len(v) > 1 for v in runs.values()) else 12
    print(f"{'server':<24} {'conc':>4} " + " ".join(f"{label:>{width}}" for _, label in keys))
    for name in names:
        for c in concurrency:
            cells = [_cell([r[k] for r in runs[(name, c)]]) for k, _ in keys]
            print(f"{name:<24} {c:>4} " + " ".join(f"{cell:>{width}}" for cell in cells))
    if len(names) != 2:
        return
    ours, theirs = names
    print(f"\n{ours} / {theirs}, same round:")
    for c in concurrency:
        pairs = list(zip(runs[(ours, c)], runs[(theirs, c)], strict=True))
        ratios = {k: [a[k] / b[k] for a, b in pairs if b[k]] for k, _ in keys[:2]}
        line = "  ".join(
            f"{label} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
            for (k, label), v in zip(keys[:2], ratios.values(), strict=True)
        )
        print(f"  conc {c:>3}: {line}")


if __name__ == "__main__":
    main()
