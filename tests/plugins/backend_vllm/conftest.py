"""One tiny random Llama, built offline, served by ``inferd serve`` and, side by side, by ``vllm serve``.

The engines run vLLM's worker in the engine process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``; for a
world size of one vLLM picks its one-process executor then): each engine imports vLLM (about 15 s of
CPU here) once fewer than with vLLM's default executor, which starts one more process for its worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess

#: Why the vLLM tests cannot run here, or None.
SKIP = None if importlib.util.find_spec("vllm") is not None else (
    "vllm is not importable: install the plugin's extra (pip install -e 'plugins/backend_vllm[cpu]')"
)  # fmt: skip
#: What the engines need on the CPU: 1 GiB of KV cache (vLLM's default is 4 GiB), the worker in the
#: engine's process.
ENV = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
#: The longest a server holding vLLM engines may take to start on a busy 2-core machine.
START_S = 900
#: The side-by-side servers' context length.
MAX_MODEL_LEN = 512
#: A chat template that loops over content parts and renders ``tools`` (vLLM then passes parts as
#: parts), in the side-by-side folder's ``chat_template.jinja`` only (transformers 5.x's layout).
TEMPLATE = (
    "{% if tools %}<|system|>tools: {{ tools | tojson }}</s>{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}[{{ part['text'] }}]{% endfor %}{% endif %}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from inferd_backend_vllm.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def started(server: ServerProcess, timeout: float) -> ServerProcess:
    """``server`` started; when it does not come up, its log is printed (vLLM says why there) and it is stopped."""
    try:
        server.start(timeout=timeout)
    except Exception:
        print(server.log())
        server.stop()
        raise
    return server


def write_lora(directory: Path, hidden: int = 128, rank: int = 8, seed: int = 1) -> Path:
    """A LoRA adapter in PEFT's layout (adapter_config.json, adapter_model.safetensors) on the tiny
    Llama's q_proj and v_proj, random weights large enough to change its greedy tokens."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"],
              "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM", "fan_in_fan_out": False}  # fmt: skip
    (directory / "adapter_config.json").write_text(json.dumps(config))
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(2):
        for module in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator)
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(hidden, rank, generator=generator)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    return directory


def short_tmp() -> Path:
    """A temporary directory for a server (its ``TMPDIR``) whose path leaves room for socket files
    under it: a Unix socket's path holds 107 characters at most, and pytest's folders are long."""
    return Path(tempfile.mkdtemp(prefix="vt-"))


class VllmServe:
    """``vllm serve MODEL ARGS`` on a free loopback port, started at once, up from :meth:`wait` until :meth:`stop`;
    its temporary files (vLLM leaves its engine's socket files behind) in a directory removed at :meth:`stop`."""

    FLAGS = ["--dtype", "float32", "--enforce-eager"]

    def __init__(self, model: Path, args: list[str], log: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        # `vllm serve` itself: the `vllm` script looks up the distribution "vllm" (vllm-cpu's is not)
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
                   "--port", str(self.port), *self.FLAGS, *args]  # fmt: skip
        self.log_path = log
        self.tmp = short_tmp()
        env = {**os.environ, **ENV, "TMPDIR": str(self.tmp)}
        with open(log, "wb") as out:  # the child keeps its own copy
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}"

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), without waiting: :meth:`stop` waits."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def wait(self, timeout: float = START_S) -> VllmServe:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vllm serve exited with {self.proc.returncode}:\n{self.log_path.read_text()[-5000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1)
        raise TimeoutError(f"vllm serve not ready in {timeout} s:\n{self.log_path.read_text()[-5000:]}")

    def stop(self) -> None:
        self.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


class SideBySide:
    """One ``inferd serve`` and one ``vllm serve`` on the same folder, for the modules that compare them:

    - ``inferd``: model ``llm`` (the chat folder, Hermes tool calls, a LoRA adapter ``sql`` in Triton's
      vLLM backend layout: ``enable_lora`` and ``multi_lora.json``) and ``embed`` (vLLM's pooling
      runner, ``"runner": "pooling"``), the OpenAI frontend on a port of its own;
    - ``vllm_llm``: ``vllm serve`` of the same folder as ``llm`` with the same tool parser and
      ``--lora-modules sql=...``.

    ``embed``'s vectors are checked against transformers' (test_embeddings_lora.py), not against a
    ``vllm serve --runner pooling`` of their own: that server cost about 28 s of CPU to start, for
    vectors that equal transformers' to 1e-7.
    """

    def __init__(self, inferd: ServerProcess, vllm_llm: VllmServe, inferd_tmp: Path) -> None:
        self.inferd, self.vllm_llm = inferd, vllm_llm
        #: The ``inferd serve``'s temporary directory (its ``TMPDIR``), where vLLM binds its engines' sockets.
        self.inferd_tmp = inferd_tmp


#: The test that stops the side-by-side ``inferd serve``: it runs after every other test of the session.
STOPS_INFERD = "test_server.py::test_stopping_names_the_model_in_vllms_lines_and_ends_without_a_traceback"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move :data:`STOPS_INFERD` last (after the root conftest's order: slow files first), so that
    no test of this folder finds the shared server stopped."""
    last = [item for item in items if item.nodeid.endswith(STOPS_INFERD)]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture(scope="session")
def chat_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with :data:`TEMPLATE` as its chat template, only in ``chat_template.jinja``."""
    from inferd_backend_vllm.tiny_model import build_tiny_llama

    directory = build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-chat"))
    assert "chat_template" not in json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "chat_template.jinja").write_text(TEMPLATE)
    return directory


@pytest.fixture(scope="package")
def side_by_side(tmp_path_factory: pytest.TempPathFactory, chat_llama: Path) -> Iterator[SideBySide]:
    """The servers of :class:`SideBySide`, both starting at once; stopped after this folder's tests
    (the vLLM folder runs on one xdist worker, its files one after another)."""
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    work = tmp_path_factory.mktemp("side-by-side")
    lora = write_lora(work / "sql")
    llm_args = ["--max-model-len", str(MAX_MODEL_LEN), "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                "--enable-lora", "--max-lora-rank", "8", "--lora-modules", f"sql={lora}", "--served-model-name", "llm"]  # fmt: skip
    vllm_llm = VllmServe(chat_llama, llm_args, work / "vllm-llm.log")
    repo = work / "repo"
    # as Triton's samples write a LoRA model: enable_lora in model.json, the adapters in multi_lora.json
    write_vllm_repository(repo, chat_llama, "llm", max_model_len=MAX_MODEL_LEN, tool_call_parser="hermes",
                          enable_lora="true", max_lora_rank=8)  # fmt: skip
    (repo / "llm" / "1" / "multi_lora.json").write_text(json.dumps({"sql": str(lora)}))
    write_vllm_repository(repo, chat_llama, "embed", runner="pooling", max_model_len=MAX_MODEL_LEN)
    inferd_tmp = short_tmp()
    inferd = ServerProcess([repo], ["--openai-port", "0", "--openai-address", "127.0.0.1"],
                           env={**ENV, "TMPDIR": str(inferd_tmp)})  # fmt: skip
    try:
        started(inferd, START_S)
        yield SideBySide(inferd, vllm_llm.wait(), inferd_tmp)
    finally:  # both stop at once
        vllm_llm.terminate()
        inferd.stop()
        shutil.rmtree(inferd_tmp, ignore_errors=True)
        vllm_llm.stop()
