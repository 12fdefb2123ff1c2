"""inferd's test kit for plugin authors: ``pytest_plugins = ["inferd.testing"]``.

It gives real servers on ports the system picks (a subprocess running ``inferd serve``, or an
in-process server built with plugin objects you pass in), an in-process server's HTTP app over
``httpx.ASGITransport`` (``asgi_client``, no socket), model repositories written from a dict, an
``identity`` backend plugin, and a backend contract test class to subclass::

    from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository

The fixtures ``inferd_server`` and ``model_repository`` are defined here, so listing this module
in ``pytest_plugins`` makes them available. tritonclient is needed only by the contract tests.
"""

from inferd.testing.asgi import asgi_client
from inferd.testing.clients import CallError, ProtocolClient
from inferd.testing.contract import BackendContract, ContractModel, ContractServer, InputSpec, make_inputs
from inferd.testing.fixtures import inferd_server, model_repository
from inferd.testing.identity import IdentityBackend, IdentityPlugin, identity_config, identity_plugin
from inferd.testing.repository import write_repository
from inferd.testing.servers import InProcessServer, ServerProcess, free_port, free_ports

__all__ = [
    "asgi_client",
    "BackendContract",
    "CallError",
    "ContractModel",
    "ContractServer",
    "IdentityBackend",
    "IdentityPlugin",
    "InProcessServer",
    "InputSpec",
    "ProtocolClient",
    "ServerProcess",
    "free_port",
    "free_ports",
    "identity_config",
    "identity_plugin",
    "inferd_server",
    "make_inputs",
    "model_repository",
    "write_repository",
]
