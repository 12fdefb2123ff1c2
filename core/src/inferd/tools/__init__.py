"""Client tools shipped with inferd: ``inferd perf`` (perf_analyzer) and ``inferd analyze`` (model_analyzer).

They talk to any KServe v2 server (inferd or Triton) and need the ``tools`` extra
(``pip install 'inferd[tools]'``); :func:`require` turns a missing client library into a clear error.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = "pip install 'inferd[tools]'"
#: The tool commands of ``inferd`` and their modules: each has ``add_parser(subparsers)`` and
#: ``run(args) -> int``, and imports what it needs (client libraries load in ``run``).
COMMANDS = {
    "perf": "inferd.tools.perf.cli",
    "analyze": "inferd.tools.analyze.cli",
    "check": "inferd.tools.check",
    "health": "inferd.tools.health",
    "replay": "inferd.tools.replay",
}


class ToolError(Exception):
    """A failure the tool reports as ``error: <message>`` with a non-zero exit status."""


def command(name: str) -> ModuleType:
    """The module of the tool command ``name`` (one of :data:`COMMANDS`)."""
    return importlib.import_module(COMMANDS[name])


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise a :class:`ToolError` telling how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ToolError(f"{purpose} needs the '{module}' package ({exc}); install it with: {INSTALL_HINT}") from None
