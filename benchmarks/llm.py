"""inferd's vLLM backend beside vLLM's own OpenAI server: the same tiny model, the same prompts.

Output tokens per second and time to first token (p50/p99) at each concurrency, streamed. inferd is
called through its OpenAI frontend when that plugin is installed (``/v1/completions``), else through
``generate_stream``; vLLM through ``vllm serve``'s ``/v1/completions``. Prints a table; asserts
nothing. Long on a busy machine: run it on a quiet one.

    .venv/bin/python benchmarks/llm.py [--concurrency 1 8 32] [--requests-per-client 4] [--max-tokens 64]
        [--model /path/to/hf-model]   # default: a tiny random Llama built offline
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


def openai_target(name: str, base: str, model: str) -> Target:
    def body(prompt: str, max_tokens: int) -> dict[str, object]:
        return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip

    def tokens(event: dict[str, object]) -> int:
        usage = event.get("usage")
        return int(usage["completion_tokens"]) if isinstance(usage, dict) else 0

    return Target(name, f"{base}/v1/completions", body, tokens)


def generate_stream_target(base: str) -> Target:
    def body(prompt: str, max_tokens: int) -> dict[str, object]:
        params = json.dumps({"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
        return {"text_input": prompt, "stream": True, "sampling_parameters": params, "return_num_output_tokens": True}

    def tokens(event: dict[str, object]) -> int:
        return int(event.get("num_output_tokens", 0))  # type: ignore[call-overload]

    return Target("inferd generate_stream", f"{base}/v2/models/llm/generate_stream", body, tokens)


async def one_request(client: httpx.AsyncClient, target: Target, prompt: str, max_tokens: int) -> tuple[float, int]:
    """(time to the first streamed event, output tokens) of one streamed request."""
    start = time.perf_counter()
    first, tokens = None, 0
    async with client.stream("POST", target.url, json=target.body(prompt, max_tokens)) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if first is None:
                first = time.perf_counter() - start
            tokens += target.tokens(json.loads(line[6:]))
    return first or 0.0, tokens


async def load(target: Target, concurrency: int, per_client: int, max_tokens: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        await one_request(client, target, PROMPTS[0], 4)  # warm up

        async def worker(i: int) -> list[tuple[float, int]]:
            return [await one_request(client, target, PROMPTS[(i + k) % len(PROMPTS)], max_tokens) for k in range(per_client)]

        start = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(worker(i) for i in range(concurrency))) for r in rs]
        wall = time.perf_counter() - start
    ttft = sorted(r[0] * 1000 for r in results)
    return {
        "tok_s": sum(r[1] for r in results) / wall,
        "ttft_p50": statistics.median(ttft),
        "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
    }


def start_inferd(model: Path, workdir: Path) -> tuple[ServerProcess | subprocess.Popen[bytes], Target]:
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    repo = write_vllm_repository(workdir / "repo", model, **ENGINE)
    if importlib.util.find_spec("inferd_frontend_openai") is None:
        server = ServerProcess([repo], env=ENV).start(timeout=600)
        return server, generate_stream_target(f"http://{server.http_url}")
    port = free_port()
    server = ServerProcess([repo], args=["--openai-port", str(port), "--openai-address", "127.0.0.1"], env=ENV)
    server.start(timeout=600)
    return server, openai_target("inferd openai", f"http://127.0.0.1:{port}", "llm")


def start_vllm(model: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], Target]:
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--port", str(port),
           "--host", "127.0.0.1", "--served-model-name", "llm", "--dtype", "float32", "--max-model-len", "256",
           "--enforce-eager"]  # fmt: skip
    log = open(workdir / "vllm-serve.log", "wb")
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
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: a tiny random Llama)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inferd-llm-bench-") as tmp:
        workdir = Path(tmp)
        if args.model is None:
            from inferd_backend_vllm.tiny_model import build_tiny_llama

            args.model = build_tiny_llama(workdir / "tiny-llama")
        rows: dict[str, dict[int, dict[str, float]]] = {}
        # One server at a time, so that each has the machine's cores to itself.
        for start in (start_inferd, start_vllm):
            handle, target = start(args.model, workdir)
            try:
                rows[target.name] = {c: asyncio.run(load(target, c, args.requests_per_client, args.max_tokens))
                                     for c in args.concurrency}  # fmt: skip
            finally:
                stop(handle)
    print(f"{'server':<24} {'conc':>4} {'tok/s':>9} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
    for name, by_c in rows.items():
        for c, r in by_c.items():
            print(f"{name:<24} {c:>4} {r['tok_s']:>9.1f} {r['ttft_p50']:>12.1f} {r['ttft_p99']:>12.1f}")


if __name__ == "__main__":
    main()
