"""TLS for the frontends: the flags, their certificate files checked at start-up, and server contexts
that pick up new certificates for new connections.

gRPC takes Triton's flags (``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert``); HTTP and the metrics port take inferd's own
(``--http-ssl-certfile``, ``--http-ssl-keyfile``, ``--http-ssl-ca-certs``,
``--http-ssl-verify-client``; Triton leaves HTTP TLS to a proxy). Every problem with the files (one
missing or unreadable, no certificate or key in it, a key that does not match its certificate,
client verification without a CA) stops the server before it starts, naming the flag and the file.

Certificates are reloaded without dropping a connection: the files are looked at (at most once a
second) when a client connects, and at once on SIGHUP; connections made after a change get the new
certificate, the open ones keep theirs. A change that does not load (a key that does not match yet,
half-way through a rotation) is logged and the old certificate stays.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from inferd.contracts.errors import StartupError
from inferd.contracts.flags import parse_bool

__all__ = [
    "CertificateWatch",
    "TlsConfig",
    "TlsError",
    "TlsFlags",
    "add_arguments",
    "grpc_config",
    "http_config",
    "listening_context",
    "refusal",
    "reload_on_sighup",
    "server_context",
    "warnings",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How often, at most, a connecting client makes the server look at its certificate files.
CHECK_SECONDS = 1.0


class TlsError(StartupError, ValueError):
    """A TLS setting the server cannot start with; the message names the flag and the file."""


@dataclass(frozen=True)
class TlsFlags:
    """The flags that name one frontend's certificate files (for messages)."""

    cert: str
    key: str
    ca: str


GRPC_FLAGS = TlsFlags("--grpc-server-cert", "--grpc-server-key", "--grpc-root-cert")
HTTP_FLAGS = TlsFlags("--http-ssl-certfile", "--http-ssl-keyfile", "--http-ssl-ca-certs")


@dataclass(frozen=True)
class TlsConfig:
    """One frontend's certificate files, and whether clients must present a certificate the CA signed."""

    cert: str
    key: str | None
    ca: str | None
    verify_client: bool
    flags: TlsFlags

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.cert, self.key, self.ca) if f)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The TLS flags of ``inferd serve``."""
    g = parser.add_argument_group("TLS", "certificate files are PEM; see docs/security.md")
    g.add_argument(
        "--grpc-use-ssl",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="serve gRPC over TLS with --grpc-server-cert and --grpc-server-key (default: false)",
    )
    g.add_argument(
        "--grpc-use-ssl-mutual",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="serve gRPC over TLS and require a client certificate signed by --grpc-root-cert; "
        "implies --grpc-use-ssl (default: false)",
    )
    g.add_argument("--grpc-server-cert", default=None, metavar="FILE", help="the gRPC server's certificate (chain)")
    g.add_argument("--grpc-server-key", default=None, metavar="FILE", help="the gRPC server's private key")
    g.add_argument(
        "--grpc-root-cert",
        default=None,
        metavar="FILE",
        help="CA certificates that sign the clients' certificates (mutual TLS)",
    )
    g.add_argument(
        "--http-ssl-certfile",
        default=None,
        metavar="FILE",
        help="serve HTTP and metrics over TLS with this certificate (chain; may hold the key too)",
    )
    g.add_argument("--http-ssl-keyfile", default=None, metavar="FILE", help="the HTTP server's private key")
    g.add_argument(
        "--http-ssl-ca-certs",
        default=None,
        metavar="FILE",
        help="CA certificates that sign the HTTP clients' certificates",
    )
    g.add_argument(
        "--http-ssl-verify-client",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="require an HTTP client certificate signed by --http-ssl-ca-certs (default: false)",
    )


def grpc_config(values: Mapping[str, Any]) -> TlsConfig | None:
    """gRPC's TLS from the parsed flags (``None``: clear text), as Triton reads them; flags that do
    not go together raise :class:`TlsError`, a start-up error."""
    mutual = bool(values.get("grpc_use_ssl_mutual"))
    if not (mutual or values.get("grpc_use_ssl")):
        return None
    on = "--grpc-use-ssl-mutual=true" if mutual else "--grpc-use-ssl=true"
    cert, key, ca = values.get("grpc_server_cert"), values.get("grpc_server_key"), values.get("grpc_root_cert")
    if not cert:
        raise TlsError(f"{on} needs --grpc-server-cert (the server's certificate file)")
    if not key:
        raise TlsError(f"{on} needs --grpc-server-key (the server's private key file)")
    if mutual and not ca:
        raise TlsError(f"{on} needs --grpc-root-cert (the CA certificates that sign the clients' certificates)")
    return TlsConfig(cert, key, ca or None, mutual, GRPC_FLAGS)


def http_config(values: Mapping[str, Any]) -> TlsConfig | None:
    """HTTP's (and the metrics port's, and a plugin's HTTP port's) TLS from the parsed flags
    (``None``: clear text); flags that do not go together raise :class:`TlsError`, a start-up error."""
    cert, key, ca = values.get("http_ssl_certfile"), values.get("http_ssl_keyfile"), values.get("http_ssl_ca_certs")
    verify = bool(values.get("http_ssl_verify_client"))
    if not cert:
        given = [
            f
            for f, v in (
                ("--http-ssl-keyfile", key),
                ("--http-ssl-ca-certs", ca),
                ("--http-ssl-verify-client=true", verify),
            )
            if v
        ]
        if given:
            raise TlsError(f"{given[0]} needs --http-ssl-certfile (the server's certificate file)")
        return None
    if verify and not ca:
        raise TlsError(
            "--http-ssl-verify-client=true needs --http-ssl-ca-certs (the CA certificates that sign "
            "the clients' certificates)"
        )
    return TlsConfig(cert, key or None, ca or None, verify, HTTP_FLAGS)


def refusal(values: Mapping[str, Any]) -> str | None:
    """Why the TLS flags cannot start a server (the files are read and checked), or ``None``."""
    try:
        for config in (grpc_config(values), http_config(values)):
            if config is not None:
                server_context(config)
    except TlsError as exc:
        return str(exc)
    return None


def warnings(values: Mapping[str, Any]) -> list[str]:
    """gRPC certificate flags given while gRPC serves clear text (Triton ignores them too)."""
    if values.get("grpc_use_ssl") or values.get("grpc_use_ssl_mutual"):
        return []
    given = [
        f"--grpc-{n.replace('_', '-')}" for n in ("server_cert", "server_key", "root_cert") if values.get(f"grpc_{n}")
    ]
    return [f"{flag} is ignored: gRPC serves clear text unless --grpc-use-ssl=true" for flag in given]


def _no_password() -> str:
    raise TlsError("encrypted")


def _readable(path: str, flag: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TlsError(f"{flag} {path}: cannot read the file: {exc.strerror or exc}") from None


def server_context(config: TlsConfig, alpn: Sequence[str] = ()) -> ssl.SSLContext:
    """A server-side context from ``config``'s files (TLS 1.2 or later), offering ``alpn``."""
    flags = config.flags
    for path, flag in ((config.cert, flags.cert), (config.key, flags.key), (config.ca, flags.ca)):
        if path:
            _readable(path, flag)
    _has_certificate(config.cert, flags.cert)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    key_flag = f"{flags.key} {config.key}" if config.key else f"{flags.cert} {config.cert}"
    try:
        ctx.load_cert_chain(config.cert, config.key, password=_no_password)
    except TlsError:
        raise TlsError(f"{key_flag}: the private key is encrypted; give an unencrypted key file") from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsError(
                f"{key_flag}: the private key does not match the certificate in {flags.cert} {config.cert}"
            ) from None
        raise TlsError(f"{key_flag}: no PEM private key found in the file") from None
    if config.ca:
        _has_certificate(config.ca, flags.ca, ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED if config.verify_client else ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def _has_certificate(path: str, flag: str, into: ssl.SSLContext | None = None) -> None:
    """Load ``path``'s certificates as CAs (into a throw-away context unless ``into``)."""
    try:
        (into or ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)).load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise TlsError(f"{flag} {path}: no PEM certificate found in the file") from None


def _signature(files: Sequence[str]) -> tuple[tuple[int, int, int] | None, ...]:
    """What changes when a file is rewritten or replaced (a renamed-in file or a symlink swap too)."""
    out: list[tuple[int, int, int] | None] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class CertificateWatch(Generic[T]):
    """``build(config)``, built again when ``config``'s files change (looked at by :meth:`poll`, at
    most every :data:`CHECK_SECONDS`) or on :meth:`reload`; a failed build keeps the last value."""

    def __init__(self, config: TlsConfig, build: Callable[[TlsConfig], T], what: str) -> None:
        self.config = config
        self.what = what
        self._build = build
        self._seen = _signature(config.files())
        self.value: T = build(config)  # a TlsError here stops the start
        #: Bumped on each successful reload.
        self.generation = 0
        self._next_check = time.monotonic() + CHECK_SECONDS

    def poll(self) -> None:
        """Reload if the files changed since they were last looked at (at most once a second)."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_SECONDS
        if _signature(self.config.files()) != self._seen:
            self.reload()

    def reload(self) -> bool:
        """Build from the files now; on failure log why and keep the certificate in use."""
        self._seen = _signature(self.config.files())
        try:
            value = self._build(self.config)
        except TlsError as exc:
            log.error(
                "%s: the new TLS certificate files were not loaded (the old ones stay in use): %s", self.what, exc
            )
            return False
        self.value = value
        self.generation += 1
        log.info("%s: TLS certificate reloaded from %s", self.what, self.config.cert)
        return True


def listening_context(
    config: TlsConfig, alpn: Sequence[str], what: str
) -> tuple[ssl.SSLContext, CertificateWatch[ssl.SSLContext]]:
    """The context a listening socket keeps, and the watch behind it (reloaded on SIGHUP until
    :func:`forget`); a file that does not load stops the start, naming ``what``.

    asyncio's server keeps one context for good, so this one hands each new connection the
    watch's current context during the handshake (the SNI callback, which OpenSSL calls for every
    client hello, swaps the connection's context).
    """
    try:
        watch = CertificateWatch(config, lambda c: server_context(c, alpn), what)
    except TlsError as exc:
        raise StartupError(f"{what}: {exc}") from None
    outer = watch.value

    def pick(conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext) -> None:
        try:
            watch.poll()
            if watch.value is not ctx:
                conn.context = watch.value
        except Exception:  # a failed reload must not fail the handshake
            log.exception("%s: TLS certificate check failed", what)

    outer.sni_callback = pick
    reload_on_sighup(watch)
    return outer, watch


class _Sighup:
    """The watches of this process, reloaded together on SIGHUP."""

    def __init__(self) -> None:
        self.watches: list[CertificateWatch[Any]] = []
        self.installed: asyncio.AbstractEventLoop | None = None

    def add(self, watch: CertificateWatch[Any]) -> None:
        self.watches.append(watch)
        loop = asyncio.get_running_loop()
        if self.installed is loop:
            return
        try:
            loop.add_signal_handler(signal.SIGHUP, self.reload)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread (an in-process server)
            return
        self.installed = loop

    def remove(self, watch: CertificateWatch[Any]) -> None:
        if watch in self.watches:
            self.watches.remove(watch)

    def reload(self) -> None:
        for watch in self.watches:
            watch.reload()


_SIGHUP = _Sighup()


def reload_on_sighup(watch: CertificateWatch[Any]) -> None:
    """Reload ``watch`` on SIGHUP (installs the handler on the running loop, from its thread)."""
    _SIGHUP.add(watch)


def forget(watch: CertificateWatch[Any]) -> None:
    """Stop reloading ``watch`` on SIGHUP (its frontend stopped)."""
    _SIGHUP.remove(watch)
