"""What the stubs of one isolated model share: how to start them, and where what they send goes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from inferd.api import ModelClient
from inferd_backend_python.isolation import Isolation
from inferd_backend_python.launcher import Launcher
from inferd_backend_python.pb_request import ModelBinding
from inferd_backend_python.process_settings import Settings
from inferd_backend_python.stub_logs import LogBudget


@dataclass(frozen=True)
class StubContext:
    """One isolated model version, as its stubs' connections see it."""

    model_name: str
    settings: Settings
    launcher: Launcher
    #: The server's event loop: it reads and writes every stub's socket.
    loop: asyncio.AbstractEventLoop
    decoupled: bool
    #: The server's models, for BLS calls (None: the model runs outside a server).
    models: ModelClient | None
    #: The model's ``pb_utils`` binding: its custom metrics are the server's copies.
    binding: ModelBinding
    #: What its stubs may log, all instances together (:mod:`inferd_backend_python.stub_logs`).
    log_budget: LogBudget
    isolation: Isolation
