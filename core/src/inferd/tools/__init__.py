"""Client tools shipped with inferd: ``inferd perf`` (perf_analyzer) and ``inferd analyze`` (model_analyzer).

They talk to any KServe v2 server (inferd or Triton) and need the ``tools`` extra
(``pip install 'inferd[tools]'``); :func:`require` turns a missing client library into a clear error.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = "pip install 'inferd[tools]'"


class ToolError(Exception):
    """A failure the tool reports as ``error: <message>`` with a non-zero exit status."""


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise a :class:`ToolError` telling how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ToolError(f"{purpose} needs the '{module}' package ({exc}); install it with: {INSTALL_HINT}") from None
