"""How the suite is spread over xdist workers (tests/conftest.py), what collecting it costs, and where
shared helpers live."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, TESTS, xdist_unit


def test_the_vllm_files_are_one_unit_of_work_and_other_files_their_own():
    vllm = {xdist_unit("tests/plugins/backend_vllm/test_server.py::test_config"),
            xdist_unit("tests/plugins/backend_vllm/test_new_file.py::test_x[a::b]"),
            xdist_unit("tests/docs/test_doc_commands.py::test_llm_commands")}  # fmt: skip
    assert vllm == {"vllm"}
    assert xdist_unit("tests/e2e/test_http.py::test_a[x]") == "tests/e2e/test_http.py"
    assert xdist_unit("tests/docs/test_doc_getting_started.py::test_getting_started_commands") != "vllm"


def test_files_with_slow_tests_come_first(request: pytest.FixtureRequest):
    files = list(dict.fromkeys(str(item.path) for item in request.session.items))
    slow = {str(item.path) for item in request.session.items if item.get_closest_marker("slow")}
    assert files[: len(slow)] == [f for f in files if f in slow]


def test_collecting_a_file_does_not_load_what_it_imports_lazily(tmp_path: Path):
    """Each xdist worker collects every file: a module held through ``tests.lazy`` must load when a
    test uses it, not when pytest and its plugins look over the file's names."""
    (tmp_path / "heavy_module.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.loaded').touch()\nVALUE = 42\n"
    )
    (tmp_path / "test_holder.py").write_text(
        textwrap.dedent("""
        from tests.lazy import lazy_import

        heavy = lazy_import("heavy_module")

        def test_uses_it():
            assert heavy.VALUE == 42
    """)
    )
    loaded = tmp_path / "heavy_module.loaded"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}

    def pytest_in(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    collected = pytest_in("--collect-only")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "test_uses_it" in collected.stdout
    assert not loaded.exists(), "collecting the file loaded the module it imports lazily"
    ran = pytest_in()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert loaded.exists()


def test_a_helper_two_test_files_share_lives_in_a_helper_module():
    """Not in one of the test files (tests/README.md lists the helper modules): a test file is read
    for its tests, and importing one runs its module-level set-up in the other's module."""
    found = set()
    for path in TESTS.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").rsplit(".", 1)[-1].startswith("test_"):
                found.add(f"{path.relative_to(ROOT)} imports {node.module}")
    assert not found, sorted(found)
