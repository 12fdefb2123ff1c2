"""inferd's test kit for plugin authors: ``pytest_plugins = ["inferd.testing"]``.

It gives real servers on free ports (a subprocess running ``inferd serve``, or an in-process
server built with plugin objects you pass in), model repositories written from a dict, and, in
:mod:`inferd.testing.contract`, a backend contract test class to subclass.
"""

from inferd.testing.fixtures import inferd_server, model_repository  # noqa: F401  (pytest fixtures)
from inferd.testing.repository import write_repository
from inferd.testing.servers import InProcessServer, ServerProcess, free_port

__all__ = ["InProcessServer", "ServerProcess", "free_port", "write_repository"]
