"""``inferd serve`` over TLS for tests: a client's SSL context, and a server whose health is polled over https."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable

from inferd.testing import ServerProcess
from tests.waiting import wait_for


def client_context(ca: str, cert: str | None = None) -> Callable[[], ssl.SSLContext]:
    """tritonclient.http's ``ssl_context_factory``: trust ``ca``, present ``cert`` (``.pem`` + ``.key``)."""

    def make() -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert + ".pem", cert + ".key")
        return ctx

    return make


class TlsServer(ServerProcess):
    """``inferd serve`` whose HTTP port speaks TLS: liveness is polled over https, trusting ``ca``
    and presenting ``client_cert`` (set both before :meth:`start`)."""

    ca: str = ""
    client_cert: str | None = None

    def _https(self, path: str) -> int:
        try:
            url = f"https://localhost:{self.http_port}{path}"
            with urllib.request.urlopen(url, timeout=2, context=client_context(self.ca, self.client_cert)()) as r:
                return int(r.status)
        except OSError:
            return 0

    def wait_live(self, timeout: float = 120.0) -> None:
        self._until(lambda: self._https("/v2/health/live") == 200, "inferd live over https", timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        self._until(lambda: self._https("/v2/health/ready") == 200, "inferd ready over https", timeout)

    def _until(self, ok: Callable[[], bool], what: str, timeout: float) -> None:
        def answered() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.proc.returncode}:\n{self.log()}")
            return ok()

        wait_for(answered, what, timeout, log=self.log)
