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

from tests.conftest import ROOT, TESTS, XDIST_FIRST, xdist_unit


def test_the_vllm_files_are_one_unit_of_work_and_other_files_their_own():
    vllm = {xdist_unit("tests/plugins/backend_vllm/test_server.py::test_config"),
            xdist_unit("tests/plugins/backend_vllm/test_new_file.py::test_x[a::b]"),
            xdist_unit("tests/docs/test_doc_commands.py::test_llm_commands")}  # fmt: skip
    assert vllm == {"vllm"}
    assert xdist_unit("tests/e2e/test_http.py::test_a[x]") == "tests/e2e/test_http.py"
    assert xdist_unit("tests/docs/test_doc_getting_started.py::test_getting_started_commands") != "vllm"
    # README.md's walk starts no engine; the fresh clone's walk, a unit of its own, runs beside the group
    assert xdist_unit("tests/docs/test_doc_commands.py::test_readme_commands") == "tests/docs/test_doc_commands.py"
    walk = "tests/docs/test_fresh_clone_walk.py"
    assert xdist_unit(f"{walk}::test_make_serve_then_readme_then_getting_started_then_llm_in_one_walk") == walk
    assert XDIST_FIRST[0] == "vllm" and walk in XDIST_FIRST


def test_the_first_units_then_files_with_slow_tests_come_first(request: pytest.FixtureRequest):
    items = request.session.items
    first = [item for item in items if xdist_unit(item.nodeid) in XDIST_FIRST]
    assert items[: len(first)] == first
    units = list(dict.fromkeys(xdist_unit(item.nodeid) for item in first))
    assert units == [unit for unit in XDIST_FIRST if unit in units]
    slow = {str(item.path) for item in items if item.get_closest_marker("slow")}
    files = list(dict.fromkeys(str(item.path) for item in items[len(first) :]))
    in_slow = [f in slow for f in files]
    assert in_slow == sorted(in_slow, reverse=True), files


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
