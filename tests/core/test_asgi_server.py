"""The ASGI server's event loop and connection transport (real sockets, real uvicorn)."""

from __future__ import annotations

import asyncio

import pytest

from inferd.asgi_server import run


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert run(_loop_module()).startswith("uvloop")


def test_run_returns_the_coroutines_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run(answer()) == 42
