"""Every command of README.md and docs/llm.md, run as written (see ``tests/docs/walk.py``): one
page per test, one server at a time (docs/getting-started.md's walk, the longest, has a file of
its own so that xdist runs it beside these). The install commands are the
Makefile's (``make serve``, ``make test``) or pip's and are not run here; each test names them, so
a new one in a page is noticed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.docs.walk import ROOT, Walk


def test_readme_commands(tmp_path: Path) -> None:
    walk = Walk(tmp_path)
    walk.run(ROOT / "README.md")
    assert walk.skipped == ["make serve", "make test"]
    assert len(walk.logs) == 1 and "inferd perf" in " ".join(walk.ran)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 37 s on a quiet machine, about 200 s in make test; 484 s seen on a busy one
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not importable")
def test_llm_commands(tmp_path: Path) -> None:
    # vLLM's worker in its engine's process (one import of vLLM fewer: ~15 s of CPU), as the vLLM tests run it
    walk = Walk(tmp_path, openai=True, env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    walk.run(ROOT / "docs" / "llm.md")
    assert walk.skipped == ["make install-llm && . .venv/bin/activate"]
