"""How the suite is spread over xdist workers (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import xdist_unit


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
