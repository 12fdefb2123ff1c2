"""pytest fixtures of the test kit."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from inferd.testing.repository import write_repository
from inferd.testing.servers import InProcessServer, ServerProcess


@pytest.fixture
def model_repository(tmp_path: Path) -> Callable[[Mapping[str, Mapping[str, Any]]], Path]:
    """``model_repository({model: {path: content}})`` writes a repository and returns its path."""
    counter = iter(range(1000))

    def make(models: Mapping[str, Mapping[str, Any]]) -> Path:
        return write_repository(tmp_path / f"repo{next(counter)}", models)

    return make


@pytest.fixture
def inferd_server() -> Iterator[Callable[..., ServerProcess | InProcessServer]]:
    """``inferd_server(repo, *args)`` starts ``inferd serve`` (installed plugins) in a subprocess;
    ``inferd_server(repo, plugins=[obj, ...])`` starts an in-process server with exactly those
    plugins. Every server started is stopped at the end of the test."""
    started: list[ServerProcess | InProcessServer] = []

    def start(
        repo: Path | Sequence[Path], *args: str, plugins: Sequence[Any] | None = None, **kw: Any
    ) -> ServerProcess | InProcessServer:
        repos = [repo] if isinstance(repo, Path) else list(repo)
        server: ServerProcess | InProcessServer
        if plugins is not None:
            server = InProcessServer(repos, plugins=plugins, **kw)
        else:
            server = ServerProcess(repos, args, **kw)
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.stop()
