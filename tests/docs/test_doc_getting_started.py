"""Every command of docs/getting-started.md, run as written (see ``tests/docs/walk.py``). The
install commands are the Makefile's or pip's and are not run here; the test names them, so a new
one in the page is noticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.walk import ROOT, Walk


@pytest.mark.slow
def test_getting_started_commands(tmp_path: Path) -> None:
    walk = Walk(tmp_path)
    walk.run(ROOT / "docs" / "getting-started.md")
    assert walk.skipped == [
        "make serve", "make test", "python -m venv .venv && . .venv/bin/activate",
        "pip install ./core ./plugins/backend_onnx", "pip install ./core ./plugins/backend_python",
        "pip install -c constraints.txt ./core ./plugins/backend_pytorch",
    ]  # fmt: skip
    assert (tmp_path / "analyze-results" / "report.html").exists()
    assert len(walk.logs) == 5 and walk.compared == 9
