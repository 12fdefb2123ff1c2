"""The server's own run state: live, accepting requests, and the event loop it runs on.

The :class:`~inferd.server.Server` owns one and is its only writer; the data plane reports it
(health routes) and the router uses its loop to run requests for instance threads.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class ServerHealth:
    """Written by the server as it starts and stops; read by everything built for it."""

    #: The process serves (``/v2/health/live``): set once start-up began, cleared at the end.
    live: bool = False
    #: Start-up loading finished and every frontend listens (``/v2/health/ready``).
    accepting: bool = False
    #: The loop serving requests, once started (Python models calling models need it).
    loop: asyncio.AbstractEventLoop | None = None
