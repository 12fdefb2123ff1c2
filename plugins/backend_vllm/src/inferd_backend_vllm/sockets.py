"""A directory of its own for each engine's socket files.

vLLM binds an engine's ZeroMQ sockets (requests in, outputs back, the start handshake) as files
under ``VLLM_RPC_BASE_PATH``, by default the system's temporary directory, and leaves them there
once the engine's process is stopped: three files in ``/tmp`` for every load of a vLLM model, for
as long as the machine runs (a server that reloads its models under poll mode adds three each
time). Each engine gets a directory of its own, removed when the engine stops; those of engines
still running when the process ends are removed at its exit. A ``VLLM_RPC_BASE_PATH`` the operator
set is left as it is, and so is vLLM's default where a directory more would make a socket's path
longer than a Unix socket's path may be.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

VARIABLE = "VLLM_RPC_BASE_PATH"
#: The longest path a Unix socket may have (``sockaddr_un.sun_path``, less its NUL), and the longest
#: name vLLM gives a socket file under the directory (a UUID).
MAX_PATH, NAME = 107, 36
#: Whether the operator set ``VLLM_RPC_BASE_PATH``: read once, as this module loads (before any engine
#: starts). Read later, it would see the directory another model's engine start set meanwhile.
OPERATOR_SET = bool(os.environ.get(VARIABLE))
_live: set[Path] = set()
_lock = threading.Lock()


def engine_directory() -> Path | None:
    """A new directory for one engine's socket files, or None when ``VLLM_RPC_BASE_PATH`` is set."""
    if OPERATOR_SET:
        return None
    path = Path(tempfile.mkdtemp(prefix="inferd-vllm-"))
    if len(str(path)) + 1 + NAME > MAX_PATH:
        path.rmdir()
        return None
    with _lock:
        _live.add(path)
    return path


def remove(path: Path | None) -> None:
    """Remove an engine's directory (its engine stopped) with the socket files vLLM left in it."""
    if path is None:
        return
    with _lock:
        _live.discard(path)
    shutil.rmtree(path, ignore_errors=True)


@atexit.register
def _remove_all() -> None:
    """At the process's exit: the directories of the engines still running."""
    with _lock:
        paths = list(_live)
    for path in paths:
        remove(path)
