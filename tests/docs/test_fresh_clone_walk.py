"""A new user's first two hours, in order, from a fresh clone: ``make serve`` (past its install
step: the Makefile's own commands), then every command of README.md, docs/getting-started.md and
docs/llm.md as written (``tests/docs/walk.py``), in one walk: one private ``/tmp/`` and one checkout
for the three pages, so what a page leaves behind (the README tour's ``/tmp/models``, the servers'
ports, files written into the checkout) is what the next one finds. The checkout is a copy of the
tracked files (what ``git clone`` gives: no built model, no generated file of an earlier run).

The pages' own walks (test_doc_commands.py, test_doc_getting_started.py) run each page from a
clean state; this one catches a stumble between them. It takes about 4 minutes on two cores (the
LLM engine's start is about a minute of it); :data:`LIMIT_S` bounds it."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.docs.walk import ROOT, Walk

#: The whole walk's bound, seconds (pytest-timeout).
LIMIT_S = 900
#: The LLM walk's environment, as test_doc_commands.py's: vLLM's worker in its engine's process.
LLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def fresh_clone(dest: Path) -> Path:
    """The tracked files of the checkout, as they are in the working tree, copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():  # deleted in the working tree
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest


def make_serve_recipe(makefile: Path) -> list[str]:
    """The commands of the Makefile's ``serve`` target (its prerequisite, the install, is not run)."""
    lines = makefile.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("serve:"))
    recipe, pending = [], ""
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        pending += line.strip().rstrip("\\") + " "
        if not line.rstrip().endswith("\\"):
            recipe.append(" ".join(pending.split()))
            pending = ""
    return recipe


def make_vars(command: str) -> str:
    """The Makefile's variables as ``make serve`` has them in a checkout with its venv."""
    ports = {"PORT_HTTP": "8000", "PORT_GRPC": "8001", "PORT_METRICS": "8002"}
    command = command.replace("$(VENV)/bin/", "").replace("$(PY)", sys.executable)
    return re.sub(r"\$\((\w+)\)", lambda m: ports[m.group(1)], command)


@pytest.mark.slow
@pytest.mark.timeout(LIMIT_S)
def test_make_serve_then_readme_then_getting_started_then_llm_in_one_walk(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    assert not (clone / "examples" / "models" / "mlp_onnx").exists()  # built by make serve, not tracked
    walk = Walk(tmp_path / "tmp", root=clone)
    walk.tmp.mkdir()

    build, serve = (make_vars(c) for c in make_serve_recipe(clone / "Makefile"))
    walk.check(build, None, "Makefile: serve", 300)
    walk.serve(serve, "Makefile: serve", 300)
    log = walk.log()
    assert "| mlp_onnx" in log and "status page" in log, log
    with urllib.request.urlopen(f"http://localhost:{walk.ports[0]}/v2/status", timeout=30) as response:
        states = {(m["name"], m["state"]) for m in json.load(response)["models"]}
    assert states == {("add_sub", "READY"), ("string_identity", "READY"), ("mlp_onnx", "READY")}
    walk.stop()

    walk.run(clone / "README.md")
    walk.run(clone / "docs" / "getting-started.md")
    assert (walk.tmp / "analyze-results" / "report.html").exists()
    assert (walk.tmp / "plots" / "add_sub.svg").exists()  # inferd perf --plot, linked from the status page
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not importable: walked make serve, README.md and getting-started.md, not llm.md")
    walk.openai, walk.env = True, LLM_ENV
    walk.run(clone / "docs" / "llm.md")
    assert walk.skipped == [
        "make serve", "make test",  # README.md
        "make serve", "make test", "python -m venv .venv && . .venv/bin/activate",  # getting-started.md
        "pip install ./core ./plugins/backend_onnx", "pip install ./core ./plugins/backend_python",
        "pip install -c constraints.txt ./core ./plugins/backend_pytorch",
        "make install-llm && . .venv/bin/activate",  # llm.md
    ]  # fmt: skip
