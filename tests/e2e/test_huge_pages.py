"""``inferd serve`` starts over once with glibc's allocator asking for transparent huge pages
(``inferd.host.huge_pages``): seen in a real server's environment and page tables, with a Python
model that allocates 32 MiB while it loads (``tests/fixtures/python_models/held_tunables``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.host import huge_pages
from inferd.testing import ServerProcess, write_repository
from tests.python_models import python_model
from tests.triton_clients import tensor

MIB = 1 << 20

needs_huge_pages_on_request = pytest.mark.skipif(
    huge_pages.wanted({}) is None,
    reason="this system would not start over: no glibc 2.35+, or transparent huge pages are not 'madvise'",
)


def huge_page_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no AnonHugePages in /proc/{pid}/smaps_rollup")


def started(repo: Path, tunables: str | None, env: dict[str, str] | None = None) -> ServerProcess:
    """A server started with exactly ``tunables`` in GLIBC_TUNABLES (None: without the variable),
    where the test kit would otherwise set what ``inferd serve`` starts over with."""
    server = ServerProcess([repo], env=env)
    server.env.pop(huge_pages.VARIABLE, None)
    if tunables is not None:
        server.env[huge_pages.VARIABLE] = tunables
    return server.start()


def answers(server: ServerProcess) -> tuple[int, str]:
    """The model's Y for X = 41, and the GLIBC_TUNABLES of the server's process."""
    client = httpclient.InferenceServerClient(server.http_url)
    result = client.infer("held", [tensor("X", np.array([41], np.int64), "INT64", httpclient)])
    client.close()
    return int(result.as_numpy("Y")[0]), result.as_numpy("TUNABLES")[0].decode()


def test_tunables_keep_what_the_user_set() -> None:
    assert huge_pages.with_huge_pages("") == "glibc.malloc.hugetlb=1"
    assert huge_pages.with_huge_pages("glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert huge_pages.with_huge_pages("glibc.malloc.hugetlb=0") is None
    assert huge_pages.with_huge_pages("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2") is None


@needs_huge_pages_on_request
def test_serve_starts_over_with_huge_pages_and_a_user_can_turn_them_off(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"held": python_model("held_tunables")})
    with started(repo, "glibc.malloc.arena_max=4") as on:
        assert on.proc is not None
        # The process the test started (execve keeps its pid) now runs with the user's tunable and ours.
        assert answers(on) == (42, "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1")
        on_huge = huge_page_bytes(on.proc.pid)
    with started(repo, "glibc.malloc.hugetlb=0") as off:
        assert off.proc is not None
        assert answers(off) == (42, "glibc.malloc.hugetlb=0")
        off_huge = huge_page_bytes(off.proc.pid)
    # The model's 32 MiB sit in huge pages only where the allocator asked for them.
    assert on_huge - off_huge >= 16 * MIB, (on_huge, off_huge)


@needs_huge_pages_on_request
def test_a_process_that_started_over_does_not_start_over_again(tmp_path: Path) -> None:
    """Where glibc drops the tunable from the environment (a process with raised privileges), the
    process that started over must not loop: it serves without huge pages."""
    repo = write_repository(tmp_path / "models", {"held": python_model("held_tunables")})
    with started(repo, None, env={huge_pages.STARTED_OVER: "1"}) as server:
        assert answers(server) == (42, "")
