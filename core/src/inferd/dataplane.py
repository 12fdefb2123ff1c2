"""The one API every frontend calls. It knows no wire format.

Frontends decode into :class:`~inferd.types.InferRequest`, call the data plane, and encode what it
returns. Errors are raised as :class:`~inferd.errors.InferdError` with a kind each frontend maps
to its status codes.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

from inferd import __version__
from inferd import config as cfg
from inferd.errors import InferdError, InvalidArgument, Unavailable
from inferd.lifecycle import ControlMode
from inferd.logging_settings import SETTINGS as LOG_SETTINGS

if TYPE_CHECKING:
    from inferd.health import ServerHealth
    from inferd.lifecycle import ModelManager
    from inferd.router import Router
    from inferd.trace import Tracer

#: Extensions listed in server metadata: only those inferd implements.
EXTENSIONS: list[str] = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]

log = logging.getLogger(__name__)


class DataPlane:
    """Health, metadata, inference, statistics and repository control for frontends.

    Inference itself is the :class:`~inferd.router.Router`'s: ``resolve``, ``infer`` and
    ``stream`` are its methods, so a request costs no extra call here.
    """

    def __init__(
        self, manager: ModelManager, router: Router, health: ServerHealth, tracer: Tracer, server_name: str = "inferd"
    ) -> None:
        self.manager = manager
        self.table = manager.table
        self.router = router
        self.health = health
        #: Trace settings and sampling (the trace extension).
        self.tracer = tracer
        #: The process's log settings (the logging extension).
        self.log_config = LOG_SETTINGS
        self.server_name = server_name
        self.extensions = list(EXTENSIONS)
        # The request path: the router's own methods, with no call in between.
        self.resolve = router.resolve
        self.infer = router.infer
        self.stream = router.stream

    # -- health and metadata --------------------------------------------------------------------

    def is_live(self) -> bool:
        return self.health.live

    def is_ready(self) -> bool:
        """Ready once start-up loading finished and the frontends accept requests."""
        return self.health.live and self.health.accepting

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_name, "version": __version__, "extensions": self.extensions}

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.table.resolve(name, version)
        except InferdError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        info = self.resolve(name, version)
        return info.metadata([str(v) for v in self.table.ready_versions(name)])

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        return self.table.resolve(name, version).config

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's ``model_stats`` list: every ready version, or those of one model."""
        if name and version:
            return [self.table.resolve(name, version).stats.as_dict()]
        stats = [mv.stats.as_dict() for mv in self.table.serving(name)]
        if name and not stats:
            raise InvalidArgument(f"requested model '{name}' is not available")
        return stats

    # -- trace and logging extensions -------------------------------------------------------------

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Triton's trace settings JSON, global or for ``model``."""
        if model:
            self._check_known(model)
        return self.tracer.settings(model)

    def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Change some trace settings (a null value resets one); returns them all."""
        if model:
            self._check_known(model)
        return self.tracer.update(settings, model)

    def log_settings(self) -> dict[str, Any]:
        return self.log_config.as_json()

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Change some log settings, applied to Python logging at once; returns them all."""
        return self.log_config.update(settings)

    def _check_known(self, name: str) -> None:
        if not self.table.known(name):
            raise InvalidArgument(f"Request for unknown model : '{name}' is not in the model repository")

    # -- repository -----------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.table.index(ready_only)

    def _check_control(self) -> None:
        mode = self.manager.options.mode
        if mode is ControlMode.POLL:
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")
        if mode is ControlMode.NONE:
            raise Unavailable("explicit model load / unload is not allowed if model control mode is 'none'")

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        """Load or reload ``name``; ``parameters['config']`` (JSON) overrides its config.pbtxt."""
        self._check_control()
        override = None
        parameters = parameters or {}
        if "config" in parameters:
            override = cfg.config_from_json(parameters["config"], f"load request for '{name}'")
        files = {k[5:]: _file_bytes(name, k, v) for k, v in parameters.items() if k.startswith("file:")}
        unknown = [k for k in parameters if k != "config" and not k.startswith("file:")]
        if unknown:
            raise InvalidArgument(f"load request for '{name}': unknown parameter '{unknown[0]}'")
        await self.manager.load(name, override, files or None)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (and the ensembles that call it; see :meth:`ModelManager.unload`)."""
        self._check_control()
        await self.manager.unload(name, unload_dependents)


def _file_bytes(model: str, key: str, value: Any) -> bytes:
    """A ``file:`` load parameter: raw bytes (gRPC) or base64 text (HTTP)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise InvalidArgument(f"load request for '{model}': '{key}' is not valid base64") from None
    raise InvalidArgument(f"load request for '{model}': '{key}' must be base64 text or bytes")
