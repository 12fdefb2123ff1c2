"""Opening the transport a perf run asks for (``-i http`` or ``-i grpc``).

The client libraries are imported here, when a run starts, not when the CLI starts.
"""

from __future__ import annotations

from inferd.tools import require
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.transport import Transport


def open_transport(opts: PerfOptions) -> Transport:
    """The transport for ``opts.protocol``."""
    require("tritonclient", "inferd perf")
    if opts.protocol == "grpc":
        require("grpc", "inferd perf -i grpc")
        from inferd.tools.perf.transport_grpc import GrpcTransport

        return GrpcTransport(opts)
    require("aiohttp", "inferd perf -i http")
    from inferd.tools.perf.transport_http import HttpTransport

    return HttpTransport(opts)
