"""What inferd relies on inside uvicorn, zttp and httptools is still there.

inferd subclasses uvicorn's HTTP/1.1 (httptools) and HTTP/2 (zttp) protocols, stands in for their
request/response cycles, and drives ``uvicorn.Server`` itself (``inferd.asgi_server``,
``inferd.asgi_direct``, ``inferd.default_plugins.grpc.h2_*``). Those are internals: an upgrade
may rename or remove them and inferd would install cleanly and fail while serving. Each check
here looks at the installed library (``hasattr``, ``inspect``, real instances) and a failure names
the attribute, the installed version and what inferd uses it for.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Iterator
from importlib.metadata import version
from types import ModuleType
from typing import Any

import httptools
import pytest
import uvicorn
import zttp
from uvicorn.server import ServerState

# -- uvicorn's HTTP/1.1 protocol (inferd.asgi_server.DirectProtocol, inferd.asgi_direct) -------------

#: Methods DirectProtocol overrides or calls, and what for.
HTTPTOOLS_METHODS = {
    "connection_made": "Protocol wraps the transport in HeldWrites",
    "connection_lost": "DirectProtocol cancels its keep-alive timer",
    "on_headers_complete": "DirectProtocol takes direct routes here",
    "on_body": "a direct cycle gathers its body",
    "on_message_complete": "a direct cycle's body ends",
    "on_response_complete": "one flush per response; the keep-alive timer",
    "_start_asgi_task": "DirectProtocol._begin starts a direct cycle",
    "_unset_keepalive_if_required": "DirectProtocol's keep-alive without a timer per request",
    "shutdown": "graceful shutdown sets cycle.keep_alive",
}
#: Attributes an HttpToolsProtocol instance has (set in __init__ / read by DirectProtocol).
HTTPTOOLS_ATTRIBUTES = {
    "parser": "get_method / should_upgrade / get_http_version / should_keep_alive",
    "url": "httptools.parse_url(self.url) (set per request; checked in on_url's source)",
    "headers": "the request's headers, handed to a direct handler",
    "limit_concurrency": "direct routes only without --limit-concurrency",
    "cycle": "the current cycle, a DirectCycle for direct requests",
    "pipeline": "pipelined requests wait here",
    "flow": "pause/resume reading",
    "app": "the ASGI app handed to _start_asgi_task",
    "server_state": "total_requests, default_headers",
    "transport": "HeldWrites",
    "loop": "the keep-alive check's timer",
    "timeout_keep_alive": "--http-keep-alive-secs",
    "timeout_keep_alive_task": "the keep-alive timer",
}
#: What uvicorn's protocol reads and writes on a cycle, that DirectCycle provides too.
CYCLE_ATTRIBUTES = ("more_body", "message_event", "disconnected", "response_complete", "keep_alive", "run_asgi")
#: The httptools parser methods DirectProtocol calls.
PARSER_METHODS = ("get_method", "should_upgrade", "get_http_version", "should_keep_alive")

# -- uvicorn's HTTP/2 protocol on zttp (inferd.default_plugins.grpc.h2_protocol, h2_unary) ----------

ZTTP_H2_METHODS = {
    "connection_made": "GrpcH2Protocol corks the transport",
    "handle_request": "GrpcH2Protocol rotates connections and answers unary calls directly",
    "on_response_complete": "a UnaryCall's end (called with the stream id)",
    "resume_reading_if_idle": "a UnaryCall resumes reading",
    "_close_connection": "a rotated connection closes once idle",
}
ZTTP_H2_ATTRIBUTES = {
    "conn": "the zttp connection: stream(), close(), data_to_send()",
    "cycles": "UnaryCall registered by stream id",
    "tasks": "the server's tasks (graceful shutdown waits on them)",
    "config": "config.app, the GrpcApp",
    "loop": "timers and tasks",
    "transport": "CorkedTransport",
    "flow": "flow control for UnaryCall",
    "shutdown_requested": "no direct call once shutting down",
}
#: What uvicorn's HTTP/2 protocol reads and writes on a cycle, that UnaryCall provides too.
H2_CYCLE_ATTRIBUTES = ("body", "more_body", "message_event", "disconnected", "response_complete")
ZTTP_NAMES = ("Request", "HeaderBlock", "H2Connection", "Stream", "Connection", "SERVER", "HTTP2")
ZTTP_CONNECTION_METHODS = ("stream", "close", "data_to_send")
ZTTP_STREAM_METHODS = ("reset", "send_response", "send_data", "end_message", "stream_id")
ZTTP_REQUEST_FIELDS = ("stream_id", "path", "method", "headers", "end_stream")

# -- uvicorn.Server driven by hand (AsgiServer.start/stop, H2Transport.start/stop) ------------------

CONFIG_PARAMETERS = ("app", "http", "interface", "lifespan", "log_config", "access_log", "proxy_headers",
                     "timeout_keep_alive", "server_header", "date_header", "ssl_context_factory")  # fmt: skip
SERVER_METHODS = ("startup", "main_loop", "shutdown")
#: Server._serve's steps, which AsgiServer.start repeats (so it stays what ``serve`` does).
SERVE_STEPS = ("config.load()", "config.lifespan_class(config)", "self.startup(sockets=sockets)", "self.main_loop()",
               "self.shutdown(sockets=sockets)")  # fmt: skip
SERVER_STATE_ATTRIBUTES = ("connections", "tasks", "total_requests", "default_headers")


def _versions() -> str:
    return ", ".join(f"{name} {version(name)}" for name in ("uvicorn", "zttp", "httptools"))


def _missing(obj: Any, names: tuple[str, ...] | dict[str, str], where: str) -> list[str]:
    uses = names if isinstance(names, dict) else dict.fromkeys(names, "")
    return [f"{where}.{name}" + (f" (inferd: {use})" if use else "") for name, use in uses.items()
            if not hasattr(obj, name)]  # fmt: skip


def _assert_none(missing: list[str]) -> None:
    assert not missing, (
        f"installed {_versions()} lack what inferd relies on (pin the version that has it, or adapt "
        f"inferd.asgi_server / inferd.asgi_direct / inferd.default_plugins.grpc.h2_*):\n  " + "\n  ".join(missing)
    )


def _module(name: str, use: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _assert_none([f"module {name} ({exc}) (inferd: {use})"])
        raise


def _config() -> uvicorn.Config:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
        pass

    config = uvicorn.Config(app, lifespan="off", log_config=None)
    config.load()
    return config


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_httptools_protocol_has_what_direct_routes_use(loop: asyncio.AbstractEventLoop) -> None:
    httptools_impl = _module("uvicorn.protocols.http.httptools_impl", "the HTTP frontend's protocol")
    cls = httptools_impl.HttpToolsProtocol
    missing = _missing(cls, HTTPTOOLS_METHODS, "HttpToolsProtocol")
    protocol = cls(_config(), ServerState(), {}, _loop=loop)
    attributes = {k: v for k, v in HTTPTOOLS_ATTRIBUTES.items() if k != "url"}
    missing += _missing(protocol, attributes, "HttpToolsProtocol()")
    if "self.url" not in inspect.getsource(cls):
        missing.append("HttpToolsProtocol().url (inferd: " + HTTPTOOLS_ATTRIBUTES["url"] + ")")
    missing += _missing(httptools.HttpRequestParser, PARSER_METHODS, "httptools.HttpRequestParser")
    missing += _missing(httptools, ("parse_url",), "httptools")
    missing += _missing(httptools_impl, ("STATUS_LINE",), "uvicorn.protocols.http.httptools_impl")
    cycle_source = inspect.getsource(httptools_impl.RequestResponseCycle)
    missing += [f"RequestResponseCycle.{name} (inferd: asgi_direct.DirectCycle stands in for the cycle)"
                for name in CYCLE_ATTRIBUTES if f"self.{name}" not in cycle_source and f"def {name}" not in cycle_source]  # fmt: skip
    _assert_none(missing)


def test_status_lines_are_what_direct_routes_write() -> None:
    httptools_impl = _module("uvicorn.protocols.http.httptools_impl", "asgi_direct writes its STATUS_LINE")
    status_line = getattr(httptools_impl, "STATUS_LINE", {})
    assert status_line.get(200) == b"HTTP/1.1 200 OK\r\n", f"{_versions()}: httptools_impl.STATUS_LINE[200] changed"
    assert all(code in status_line for code in range(100, 600)), f"{_versions()}: STATUS_LINE lost codes"


def test_zttp_h2_protocol_has_what_the_grpc_transport_uses(loop: asyncio.AbstractEventLoop) -> None:
    zttp_h2_impl = _module("uvicorn.protocols.http.zttp_h2_impl", "--grpc-transport h2's protocol")
    cls = zttp_h2_impl.ZttpH2Protocol
    missing = _missing(cls, ZTTP_H2_METHODS, "ZttpH2Protocol")
    protocol = cls(_config(), ServerState(), {}, _loop=loop)
    missing += _missing(protocol, ZTTP_H2_ATTRIBUTES, "ZttpH2Protocol()")
    if "on_response_complete" in dir(cls) and len(inspect.signature(cls.on_response_complete).parameters) != 2:
        missing.append("ZttpH2Protocol.on_response_complete(stream_id) (inferd: UnaryCall calls it with the stream id)")
    cycle_source = inspect.getsource(zttp_h2_impl.RequestResponseCycle)
    missing += [f"zttp_h2_impl.RequestResponseCycle.{name} (inferd: h2_unary.UnaryCall stands in for the cycle)"
                for name in H2_CYCLE_ATTRIBUTES if f"self.{name}" not in cycle_source]  # fmt: skip
    missing += _missing(zttp, ZTTP_NAMES, "zttp")
    if hasattr(zttp, "H2Connection"):
        missing += _missing(zttp.H2Connection, ZTTP_CONNECTION_METHODS, "zttp.H2Connection")
    if hasattr(zttp, "Stream"):
        missing += _missing(zttp.Stream, ZTTP_STREAM_METHODS, "zttp.Stream")
    if hasattr(zttp, "Request"):
        missing += _missing(zttp.Request, ZTTP_REQUEST_FIELDS, "zttp.Request")
    if hasattr(zttp, "HeaderBlock") and "lowercase_names" not in _parameters(zttp.HeaderBlock.to_list):
        missing.append("zttp.HeaderBlock.to_list(lowercase_names=) (inferd: h2_unary.call_headers)")
    _assert_none(missing)


def _parameters(function: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: its docstring says
        return ("lowercase_names",) if "lowercase" in (function.__doc__ or "") else ()


def test_uvicorn_server_is_driven_as_serve_drives_it() -> None:
    parameters = inspect.signature(uvicorn.Config).parameters
    missing = [f"uvicorn.Config({name}=) (inferd: AsgiServer / H2Transport pass it)"
               for name in CONFIG_PARAMETERS if name not in parameters]  # fmt: skip
    config = _config()
    missing += _missing(config, ("lifespan_class", "timeout_graceful_shutdown", "load"), "uvicorn.Config()")
    missing += _missing(uvicorn.Server, SERVER_METHODS, "uvicorn.Server")
    server = uvicorn.Server(config)
    missing += _missing(server, ("should_exit", "server_state", "config"), "uvicorn.Server()")
    missing += _missing(server.server_state, SERVER_STATE_ATTRIBUTES, "ServerState()")
    serve = inspect.getsource(uvicorn.Server._serve) if hasattr(uvicorn.Server, "_serve") else ""
    missing += [f"uvicorn.Server._serve step {step!r} (inferd: AsgiServer.start repeats _serve's steps)"
                for step in SERVE_STEPS if step not in serve]  # fmt: skip
    _assert_none(missing)


def test_the_guard_names_what_is_missing() -> None:
    class Bare:
        pass

    missing = _missing(Bare, {"_start_asgi_task": "DirectProtocol._begin"}, "HttpToolsProtocol")
    assert missing == ["HttpToolsProtocol._start_asgi_task (inferd: DirectProtocol._begin)"]
    with pytest.raises(AssertionError, match=r"uvicorn \d.*\n\s+HttpToolsProtocol._start_asgi_task"):
        _assert_none(missing)
