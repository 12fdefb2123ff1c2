"""Every name the serving package uses from zttp and httptools, the versions they were checked
against, and :func:`check`, which looks for each of them in the installed libraries
(``tests/core/test_serving_internals.py`` runs it).

Kinds of use: ``attr``, a class or module attribute (method, constant, class) inferd calls or
reads; ``param``, a parameter of a library callable.

Both protocols are inferd's own ``asyncio.Protocol`` classes (:mod:`inferd.serving.h1`,
:mod:`inferd.serving.h2`) and the server that builds them is inferd's
(:mod:`inferd.serving.runner`): what is listed here is the libraries' public API, zttp's (an alpha,
pinned to one version) and httptools' request parser.

Upgrading a library: install the new version, run the test; fix what :func:`check` names, run the
HTTP and gRPC e2e tests and ``benchmarks/vs_triton.py``, then set the new version in :data:`VERSIONS`.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

#: The versions every name below was checked against: constraints.txt pins exactly these (a test
#: says so), and scripts/lowest_versions_smoke.sh checks the names on core's lower bounds too.
VERSIONS = {"zttp": "0.0.35", "httptools": "0.9.0"}


@dataclass(frozen=True)
class Borrowed:
    """One borrowed name: where it lives (``module:Class`` or ``module``), what kind, what for."""

    where: str
    name: str
    kind: str
    use: str


#: where | kind | names | what inferd uses them for
_TABLE = """
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
httptools | attr | HttpRequestParser parse_url HttpParserError HttpParserUpgrade | h1.H1Protocol: the \
    request parser, a request's path and query, bytes that are not HTTP (400), an upgrade request
httptools:HttpRequestParser | attr | feed_data set_dangerous_leniencies get_method get_http_version \
    should_keep_alive should_upgrade | h1.H1Protocol: bytes read, a request's method, version, keep-alive, upgrade
httptools:HttpRequestParser.set_dangerous_leniencies | param | lenient_data_after_close | h1.H1Protocol: a \
    request saying Connection: close is answered even when bytes follow it
"""


def _parse(table: str) -> list[Borrowed]:
    rows = []
    for line in table.strip().splitlines():
        where, kind, names, use = (" ".join(cell.split()) for cell in line.split(" | "))
        rows += [Borrowed(where, name, kind, use) for name in names.split()]
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
        "0.0.35's sans-IO H2Connection keeps send windows that only the DATA it frames itself spends; inferd frames "
        "its own, so every WINDOW_UPDATE it was fed added up until a window passed 2^31 - 1 (FLOW_CONTROL_ERROR after "
        "2 GiB of answers): h2_receive.FrameCutter cuts them out before zttp "
        "(tests/e2e/test_grpc_long_streams.py::test_a_stream_carries_more_than_2_gib_of_answers)",
    ),
}


def _resolve(where: str) -> object:
    module, _, qualname = where.partition(":")
    obj: object = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _problem(item: Borrowed) -> str | None:
    """Why ``item`` is not there as borrowed; None: it is."""
    try:
        owner = _resolve(item.where)
    except (ImportError, AttributeError) as exc:
        return f"{item.where} is gone ({exc}); needed for {item.name}: {item.use}"
    if item.kind == "attr":
        if hasattr(owner, item.name):
            return None
        lacks = f"has no attribute {item.name!r}"
    else:  # param
        if item.name in inspect.signature(owner).parameters:  # type: ignore[arg-type]
            return None
        lacks = f"takes no parameter {item.name!r}"
    return f"{item.where} {lacks}: inferd uses it in {item.use}"


def check(borrowed: list[Borrowed] | None = None) -> list[str]:
    """What the installed libraries lack of ``borrowed`` (default: :data:`BORROWED`), one sentence
    each naming it. Empty: everything inferd uses is there (whatever the versions:
    ``scripts/lowest_versions_smoke.sh`` runs it on the lowest allowed)."""
    problems = [p for item in (BORROWED if borrowed is None else borrowed) if (p := _problem(item)) is not None]
    if borrowed is None:
        import zttp

        if type(zttp.NEED_DATA) is not zttp.NeedData:  # h2.GrpcH2Protocol.handle_events would never stop
            problems.append(
                "zttp.NEED_DATA is no longer of type zttp.NeedData: h2.GrpcH2Protocol.handle_events "
                "stops at an event of that type"
            )
    return problems
