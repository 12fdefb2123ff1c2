"""Shared fixtures (``serve``: real ``inferd serve`` processes; ``inferd.testing``'s), and how the
suite is spread over xdist workers."""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from inferd.engine import gc_settings

if TYPE_CHECKING:
    from tests.servers import Servers

pytest_plugins = ["inferd.testing"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """``serve(models, *flags)`` starts a real ``inferd serve`` for a repository (a dict written to
    a temporary folder, or paths) with those command-line flags, and returns it once ready
    (:class:`tests.servers.Servers`). Every server it started stops when the module's tests are done;
    ``with serve(...) as server:`` stops one sooner (a parametrized fixture's, a test's own).
    Imported here, not at the top: the top runs before pytest loads ``inferd.testing`` as a plugin,
    which it could then no longer rewrite for its asserts."""
    from tests.servers import Servers

    servers = Servers(tmp_path_factory)
    yield servers
    servers.close()


#: Folders whose tests are end to end (real servers, installs, generated projects): marked ``e2e``.
E2E_FOLDERS = {"e2e", "deploy", "docs", "cookiecutter"}
TESTS = Path(__file__).resolve().parent
#: Files that run one after another on one xdist worker, by path prefix (from the root): each vLLM
#: engine on the CPU takes every core, so two at once (one per worker) slow both to a crawl.
XDIST_GROUPS = {
    "tests/plugins/backend_vllm/": "vllm",
    "tests/docs/test_doc_commands.py": "vllm",
    "tests/docs/test_fresh_clone_walk.py": "vllm",
}


def pytest_configure(config: pytest.Config) -> None:
    """Keep the file order under xdist; one OpenBLAS thread a process, OpenMP threads that do not
    spin; let every ``inferd serve`` the tests start read its modules' bytecode instead of compiling
    them: with PYTHONDONTWRITEBYTECODE set (as in some shells and images) each of the ~150 server
    starts compiled inferd's and the plugins' sources again (about 0.15 s of CPU each). The
    controller writes the bytecode once; the servers may write it too."""
    if getattr(config.option, "dist", "no") in ("loadfile", "loadscope"):
        # xdist would hand out files by their number of tests (most first): the order
        # pytest_collection_modifyitems sets (longest files first) is the one wanted.
        config.option.loadscopereorder = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # One OpenBLAS thread in every process the tests start (servers, workers, stubs, tools): numpy's
    # OpenBLAS starts a thread per core as it loads, and their spinning cost each process 0.1-0.2 s
    # of CPU (`import inferd.host.cli`: 0.63 s with them, 0.42 s without); a run starts ~270 servers.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # OpenMP threads that sleep when they have no work (torch's, so vLLM's and the PyTorch backend's)
    # instead of spinning a while first: the tiny models' steps are short, and between them the
    # spinning threads took both cores (a vLLM engine's 20 completions: 4.5 s of CPU spinning, 2.5 s
    # passive, the same wall time; the PyTorch tests 23.0 s against 21.0 s).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # The test processes collect garbage as `inferd serve` does (from its start, for the same reason:
    # the imports' heap): a worker that imports vLLM did it with ~2 s of CPU fewer.
    gc_settings.start_up()
    if not hasattr(config, "workerinput"):
        for src in [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]:
            compileall.compile_dir(src, quiet=1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. The tests wait on the servers they start (starts, polls,
    drains, timeouts, engine stops): with two workers on two cores the suite kept 1.55 cores busy;
    three kept 1.79 busy (5 min 27 s on a quiet machine), four 1.9 (5 min 05 s, the same run after it)."""
    return max(2, len(os.sched_getaffinity(0)) * 2)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` with :data:`XDIST_GROUPS`: a file is a unit of work, and a group of files
    is one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return GroupedFileScheduling(config, log)


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under ``--dist loadfile``: its group, else its file."""
    file = nodeid.split("::", 1)[0]
    return next((group for prefix, group in XDIST_GROUPS.items() if file.startswith(prefix)), file)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``e2e`` by folder; run the files with ``slow`` tests first, so that under xdist
    (``--dist loadfile``) the longest files do not start last and leave one worker running alone."""
    files: dict[Path, int] = {}
    slow: set[Path] = set()
    for item in items:
        path = Path(item.path)
        files.setdefault(path, len(files))
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).parts[0] in E2E_FOLDERS:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("slow") is not None:
            slow.add(path)
    items.sort(key=lambda item: (Path(item.path) not in slow, files[Path(item.path)]))
