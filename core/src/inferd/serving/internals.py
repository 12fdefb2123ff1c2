"""Every name the serving package borrows from uvicorn, zttp and httptools beyond their documented
use, the versions they were checked against, and :func:`check`, which looks for each of them in
the installed libraries (``tests/core/test_serving_internals.py`` runs it).

Kinds of borrowing:

- ``attr``: a class or module attribute (method, constant) inferd calls, overrides or mirrors;
- ``self``: an instance attribute the library's own code sets (``self.name = ...``), which inferd
  reads or writes;
- ``param``: a parameter of a library callable;
- ``calls``: a library method that must still call the hook inferd overrides (``name`` is called
  from ``by``), or the override is never reached;
- ``text``: a string the library's module must still contain (a logger name, the keywords a
  protocol is built with, a call).

Beside the names, :data:`CYCLES`: inferd's stand-in for uvicorn's HTTP/1.1 ``RequestResponseCycle``
must have every attribute uvicorn's protocol touches on a cycle; :func:`check` reads that set from
uvicorn's source. The HTTP/2 protocol (:mod:`inferd.serving.h2`) subclasses nothing of uvicorn's:
it borrows only how uvicorn's ``Server`` builds and shuts down a connection's protocol, and zttp's
public API.

Upgrading a library: install the new version, run the test; fix what :func:`check` names (read
the library's code for each borrowed name: same meaning, same callers?), run the HTTP and gRPC
e2e tests and ``benchmarks/vs_triton.py``, then set the new version in :data:`VERSIONS`.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import textwrap
from dataclasses import dataclass

#: The versions every name below was checked against: constraints.txt pins exactly these (a test
#: says so), and scripts/lowest_versions_smoke.sh checks the names on core's lower bounds too.
VERSIONS = {"uvicorn": "0.55.0", "zttp": "0.0.35", "httptools": "0.9.0"}

_H1 = "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol"


@dataclass(frozen=True)
class Borrowed:
    """One borrowed name: where it lives (``module:Class`` or ``module``), what kind, what for."""

    where: str
    name: str
    kind: str
    use: str
    by: str = ""  # kind ``calls``: the library method that calls ``name``


#: where | kind | names (``name<by`` for kind calls) | what inferd uses them for
_TABLE = """
uvicorn.server:Server | attr | _serve | runner.Runner.start/stop mirror its body (load, lifespan, startup, main_loop, shutdown)
uvicorn.server:Server | attr | startup main_loop shutdown | runner.Runner: start, housekeeping task, graceful stop
uvicorn.server:Server | calls | load<_serve lifespan_class<_serve startup<_serve main_loop<_serve shutdown<_serve | \
    runner.Runner repeats _serve's steps: a step _serve no longer takes is a step the runner must rethink
uvicorn.server:Server | self | should_exit lifespan server_state config | runner.Runner: stop flag, lifespan, connections, grace
uvicorn.config:Config | attr | load | runner.Runner loads the config before startup, as _serve does
uvicorn.config:Config | self | lifespan_class timeout_graceful_shutdown | runner.Runner: the lifespan _serve builds; the grace
uvicorn.config:Config | param | http interface lifespan log_config access_log proxy_headers timeout_keep_alive \
    server_header date_header ssl_context_factory | runner.Runner: Config with inferd's protocol class and TLS context
uvicorn.server:ServerState | self | connections total_requests default_headers | TLS shutdown sweep, h2's \
    connections; request count; direct replies' default headers
uvicorn.protocols.http.flow_control:FlowControl | self | write_paused | DirectCycle, UnaryStream drain before writing
uvicorn.protocols.http.flow_control:FlowControl | attr | drain pause_reading resume_reading | back-pressure: direct \
    cycles, pipelining, HTTP/2 body reads
uvicorn.protocols.http.flow_control:FlowControl | attr | pause_writing resume_writing | flow.ReadingFlow overrides \
    them, with super(): reading pauses while the write buffer is over its mark
uvicorn.protocols.http.flow_control:FlowControl | self | read_paused _transport | flow.ReadingFlow.resume_reading \
    replaces uvicorn's (not while writes or pipelined requests wait); http1: a paused body is not late
uvicorn.protocols.http.flow_control:FlowControl | param | transport | flow.ReadingFlow(transport) replaces self.flow
uvicorn.protocols.http.flow_control | attr | HIGH_WATER_LIMIT | h2.GrpcH2Protocol.handle_events: a stream's body \
    over it pauses reading
{H1} | attr | connection_made connection_lost on_headers_complete on_body on_message_complete on_response_complete \
    | http1 overrides them (DirectProtocol.on_response_complete without super())
{H1} | attr | data_received on_message_begin | http1.Protocol overrides them, with super(): a request head's size \
    and time
{H1} | calls | pause_writing<pause_writing resume_writing<resume_writing | the transport's back-pressure reaches \
    flow.ReadingFlow through the protocol's self.flow
{H1} | self | client | http1.Protocol logs a connection closed for a late head
uvicorn.protocols.http.httptools_impl:RequestResponseCycle | self | keep_alive response_complete | http1.Protocol: \
    Connection: close while draining; a 431 only when no answer is due
{H1} | attr | _unset_keepalive_if_required | http1.DirectProtocol overrides it: data arrived, the connection is busy
{H1} | calls | _unset_keepalive_if_required<data_received | http1.DirectProtocol: the override is reached on every read
{H1} | attr | _start_asgi_task | http1.DirectProtocol starts a DirectCycle (or a pipelined cycle) with it
{H1} | self | parser url headers limit_concurrency cycle pipeline flow app server_state transport loop \
    timeout_keep_alive_task timeout_keep_alive | http1.DirectProtocol: request head, cycles, flow control, keep-alive
uvicorn.protocols.http.httptools_impl | text | uvicorn.error | direct.log: a direct handler's exception is logged \
    where uvicorn logs an app's
uvicorn.server | text | server_state=self.server_state _loop=_loop | h2.GrpcH2Protocol.__init__: the keywords \
    Server.startup builds a connection's protocol with (the rest, config and app_state, are not read)
uvicorn.server | text | connection.shutdown() | h2.GrpcH2Protocol.shutdown: Server.shutdown starts each \
    connection's graceful close with it
uvicorn.server:ServerState | self | tasks | h2.GrpcH2Protocol: each call's task, which Server.shutdown waits for \
    (and cancels past the grace)
zttp | attr | Connection SERVER HTTP2 RemoteProtocolError | h2.GrpcH2Protocol: a connection's zttp state; a \
    malformed frame closes the connection
zttp:H2Connection | attr | initiate_connection receive_data next_event data_to_send stream close | \
    h2.GrpcH2Protocol drives it: preface, bytes read, events (NEED_DATA, of type NeedData, at the end), bytes to \
    write, a stream's handle, GOAWAY
zttp | attr | Request Data EndOfMessage NeedData NEED_DATA ConnectionClosed Settings Ping WindowUpdate RstStream \
    GoAway | h2.GrpcH2Protocol.handle_events: each event's kind, by type
zttp:Data | attr | stream_id data | h2.GrpcH2Protocol.handle_events: a stream's body
zttp:EndOfMessage | attr | stream_id | h2.GrpcH2Protocol.handle_events: a stream's end
zttp:RstStream | attr | stream_id error_code | h2.GrpcH2Protocol.handle_events: a reset stream; a refused one logged
zttp:Stream | attr | reset send_response end_message stream_id | h2_stream.UnaryStream, AsgiStream write \
    their answers' headers and trailers (DATA is h2_send's)
zttp:Settings | attr | params | h2.GrpcH2Protocol.handle_events: the client's SETTINGS, for h2_send's windows and \
    frame size
zttp:WindowUpdate | attr | stream_id increment | h2.GrpcH2Protocol.handle_events: the client's WINDOW_UPDATEs, for \
    h2_send's windows
zttp:Request | attr | stream_id path method headers end_stream target query | h2: a new stream's request (and \
    its ASGI scope)
zttp:HeaderBlock | attr | to_list | h2: a request's headers as pairs for a unary route
httptools | attr | parse_url | http1.DirectProtocol: a request's path
httptools:HttpRequestParser | attr | get_method get_http_version should_keep_alive should_upgrade | http1.DirectProtocol: \
    whether a request is answered directly, and kept alive
"""


def _parse(table: str) -> list[Borrowed]:
    rows = []
    for line in table.format(H1=_H1).strip().splitlines():
        where, kind, names, use = (" ".join(cell.split()) for cell in line.split(" | "))
        for name in names.split():
            name, _, by = name.partition("<")
            rows.append(Borrowed(where, name, kind, use, by))
    return rows


#: Every borrowed name.
BORROWED = _parse(_TABLE)

#: Behaviour inferd works around (or lives with), checked by tests rather than by name.
WORKAROUNDS = {
    "zttp": (
        "0.0.35's sans-IO H2Connection raises RemoteProtocolError ('HTTP/2 flood detected', GOAWAY ENHANCE_YOUR_CALM) "
        "on its 4097th stream, closed ones counted, with no setting: h2.STREAMS_PER_CONNECTION rotates connections first (tests/e2e/test_grpc_transport.py::test_one_channel_outlives_the_streams_a_connection_takes)",
        "0.0.35 refuses (RST_STREAM PROTOCOL_ERROR) a stream whose header value begins or ends with a space or tab "
        "(RFC 9113 8.2.1), with no setting to relax it; grpcio and Triton accept such metadata: h2.GrpcH2Protocol logs "
        "the refusal (tests/e2e/test_header_forwarding.py::test_padded_metadata_value)",
    ),
}

#: (uvicorn protocol, inferd's stand-in for its cycle, the protocol's methods that never see the stand-in).
CYCLES = [
    (_H1, "inferd.serving.direct:DirectCycle", ("on_body", "on_message_complete", "on_response_complete")),
]

_CYCLE_NAMES = ("cycle", "existing_cycle")


def _resolve(where: str) -> object:
    module, _, qualname = where.partition(":")
    obj: object = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


@functools.cache
def _class_trees(cls: type) -> list[ast.ClassDef]:
    """The syntax of ``cls`` and of its bases that have Python source."""
    trees = []
    for klass in cls.__mro__:
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        trees.append(ast.parse(source).body[0])
    return trees  # type: ignore[return-value]


def _self_assigned(cls: type) -> set[str]:
    """Every ``self.x`` the class's code (and its bases') assigns."""
    found = set()
    for tree in _class_trees(cls):
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        found.add(target.attr)
    return found


def _calls(cls: type, caller: str, name: str) -> bool:
    for tree in _class_trees(cls):
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == caller:
                return any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
                    for n in ast.walk(node)
                )
    return False


def _problem(item: Borrowed) -> str | None:
    """Why ``item`` is not there as borrowed; None: it is."""
    try:
        owner = _resolve(item.where)
    except (ImportError, AttributeError) as exc:
        return f"{item.where} is gone ({exc}); needed for {item.name}: {item.use}"
    if item.kind == "attr":
        ok = hasattr(owner, item.name)
    elif item.kind == "self":
        ok = isinstance(owner, type) and item.name in _self_assigned(owner)
    elif item.kind == "param":
        ok = item.name in inspect.signature(owner).parameters  # type: ignore[arg-type]
    elif item.kind == "calls":
        ok = isinstance(owner, type) and _calls(owner, item.by, item.name)
    else:  # text
        ok = item.name in inspect.getsource(owner)  # type: ignore[arg-type]
    if ok:
        return None
    lacks = {
        "attr": f"has no attribute {item.name!r}",
        "self": f"no longer sets self.{item.name}",
        "param": f"takes no parameter {item.name!r}",
        "calls": f"no longer calls self.{item.name}() from {item.by}()",
        "text": f"no longer contains {item.name!r}",
    }[item.kind]
    return f"{item.where} {lacks}: inferd uses it in {item.use}"


def _touched_on_cycles(cls: type, skipped: tuple[str, ...]) -> set[str]:
    """The attributes ``cls``'s methods (but ``skipped``) read or write on a cycle."""
    found = set()
    for tree in _class_trees(cls):
        for method in tree.body:
            if not isinstance(method, ast.FunctionDef) or method.name in skipped:
                continue
            for node in ast.walk(method):
                if not isinstance(node, ast.Attribute):
                    continue
                value = node.value
                if (isinstance(value, ast.Name) and value.id in _CYCLE_NAMES) or (
                    isinstance(value, ast.Attribute) and value.attr == "cycle"
                    and isinstance(value.value, ast.Name) and value.value.id == "self"
                ):  # fmt: skip
                    found.add(node.attr)
    return found


def _cycle_problems() -> list[str]:
    problems = []
    for protocol, stand_in, skipped in CYCLES:
        cls, ours = _resolve(protocol), _resolve(stand_in)
        assert isinstance(cls, type) and isinstance(ours, type)
        has = set(dir(ours)) | _self_assigned(ours)
        for name in sorted(_touched_on_cycles(cls, skipped) - has):
            problems.append(f"{protocol} touches cycle.{name}, which {stand_in} (its stand-in) lacks")
    return problems


def check(borrowed: list[Borrowed] | None = None) -> list[str]:
    """What the installed libraries lack of ``borrowed`` (default: :data:`BORROWED`) and of the
    cycles' attributes, one sentence each naming it. Empty: everything inferd borrows is there
    (whatever the versions: ``scripts/lowest_versions_smoke.sh`` runs it on the lowest allowed)."""
    problems = [p for item in (BORROWED if borrowed is None else borrowed) if (p := _problem(item)) is not None]
    if borrowed is None:
        problems += _cycle_problems()
        import zttp

        if type(zttp.NEED_DATA) is not zttp.NeedData:  # h2.GrpcH2Protocol.handle_events would never stop
            problems.append("zttp.NEED_DATA is no longer of type zttp.NeedData: h2.GrpcH2Protocol.handle_events "
                            "stops at an event of that type")  # fmt: skip
    return problems
