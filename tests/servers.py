"""Real ``inferd serve`` processes for a test module: what the ``serve`` fixture (tests/conftest.py) gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from inferd.testing import ServerProcess, write_repository

#: A model repository: written from ``{model: {relative path: content}}`` (see ``write_repository``),
#: or one or more already on disk.
Models = Mapping[str, Mapping[str, Any]] | Path | Sequence[Path]
S = TypeVar("S", bound=ServerProcess)


class Servers:
    """``servers(models, *flags)`` starts ``inferd serve`` for ``models`` with the command-line
    ``flags`` (on 127.0.0.1, ports the system picks, one serving process unless a flag says
    ``--workers``) and returns it once ready: ``http_url``, ``grpc_url``, ``ports``,
    ``repositories`` and ``log()`` say where it listens, what it serves and what it wrote.
    :meth:`close` stops every server started; ``with servers(...) as server:`` stops one at the
    end of the block. A fixture names ``serve`` after the fixtures its server uses (a Redis, an S3
    store): pytest sets it up after them, so the servers stop before what they use goes."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._started: list[ServerProcess] = []

    def __call__(
        self,
        models: Models,
        *flags: str,
        kind: type[S] = ServerProcess,  # type: ignore[assignment]
        wait_ready: bool = True,
        env: dict[str, str] | None = None,
    ) -> S:
        """Start a server (of class ``kind``: a subclass that reaches it otherwise, e.g. over TLS);
        ``wait_ready=False`` returns once it is live, for a server that is not to be ready."""
        server = kind(self.repositories(models), flags, env=env)
        self._started.append(server)
        server.start(wait_ready=wait_ready)
        return server

    def repositories(self, models: Models) -> list[Path]:
        """The repository paths to serve: ``models`` written to a new temporary folder when it is a dict."""
        if isinstance(models, Path):
            return [models]
        if isinstance(models, Mapping):
            return [write_repository(self._tmp.mktemp("server") / "models", models)]
        return list(models)

    def close(self) -> None:
        """Stop every server started, the last first."""
        for server in reversed(self._started):
            server.stop()
        self._started.clear()
