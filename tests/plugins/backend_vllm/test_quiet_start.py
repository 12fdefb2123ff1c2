"""A vLLM model started as a user starts it (vLLM's engine in its own process): no known-noise
warnings from vLLM or torch, no two lines saying opposite things about Triton, and one line
explaining what the engine's processes print before vLLM's logging starts. Closing its terminal
(SIGHUP) then stops it cleanly: the model unloads and its engine's directory goes."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.plugins.backend_vllm.conftest import SKIP, START_S, short_tmp, started

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

#: Lines a plain start printed before: vLLM's and torch's known noise, at WARNING.
NOISE = ["Triton is not installed", "Model Runner V2 requires Triton", "LD_PRELOAD", "Enforce eager set",
         "Inductor compilation was disabled", "Reset SSM cache type", "FutureWarning"]  # fmt: skip


def test_a_plain_vllm_start_is_quiet(tiny_llama: Path, tmp_path: Path) -> None:
    (tmp_path / "models" / "llm" / "1").mkdir(parents=True)
    engine = {"model": str(tiny_llama), "dtype": "float32", "max_model_len": 256, "enforce_eager": True}
    (tmp_path / "models" / "llm" / "1" / "model.json").write_text(json.dumps(engine))
    tmp = short_tmp()  # the server's TMPDIR, where its engine's directory (inferd-vllm-*) goes
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "TMPDIR": str(tmp)}
    server = ServerProcess([tmp_path / "models"], ["--workers", "1"], env=env)  # vLLM's default: an engine process
    try:
        started(server, START_S)
        assert len(list(tmp.glob("inferd-vllm-*"))) == 1
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        assert server.proc.wait(120) == 0
        log = server.log()
        assert "unloaded 1 model; inferd stopped" in log and not list(tmp.glob("inferd-vllm-*")), log
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert [n for n in NOISE if n in log] == [], log
    assert log.count("vLLM on the CPU: the engine's processes print") == 1, log
