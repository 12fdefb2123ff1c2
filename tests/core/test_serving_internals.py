"""The serving package is the only importer of zttp and httptools (nothing imports uvicorn), and
every name it uses from them is listed in ``inferd.serving.internals`` and found in the installed
versions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import zttp

from inferd.serving import internals

ROOT = Path(__file__).resolve().parents[2]
SERVING = ROOT / "core" / "src" / "inferd" / "serving"
LIBRARIES = ("zttp", "httptools")


def _imported_libraries(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, wherever the statement is (functions, TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _sources() -> list[Path]:
    return [*(ROOT / "core" / "src").rglob("*.py"), *ROOT.glob("plugins/*/src/**/*.py")]


def test_only_the_serving_package_imports_zttp_or_httptools() -> None:
    sources = _sources()
    assert len(sources) > 100 and any(SERVING in path.parents for path in sources)
    outside = {
        str(path.relative_to(ROOT)): sorted(libraries)
        for path in sources
        if SERVING not in path.parents and (libraries := _imported_libraries(path) & set(LIBRARIES))
    }
    assert not outside, f"only core/src/inferd/serving/ may import {', '.join(LIBRARIES)}: {outside}"


def test_nothing_imports_uvicorn() -> None:
    """Both protocols and the server are inferd's own: uvicorn is not on any request's path."""
    importers = [str(path.relative_to(ROOT)) for path in _sources() if "uvicorn" in _imported_libraries(path)]
    assert not importers


def test_every_borrowed_name_is_in_the_installed_libraries() -> None:
    problems = internals.check()
    assert not problems, "the serving package borrows what the installed libraries lack:\n" + "\n".join(problems)


def test_the_package_uses_no_private_name_it_does_not_define() -> None:
    """Each ``self._name`` the package's classes use, they define: no library's private name is used."""
    defined: set[str] = set()
    used: dict[str, str] = {}
    for path in SERVING.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            elif isinstance(node, ast.ClassDef):
                for statement in node.body:
                    targets = (
                        statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
                    )
                    defined.update(target.id for target in targets if isinstance(target, ast.Name))
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if isinstance(node.ctx, ast.Store):
                    defined.add(node.attr)
                elif node.attr.startswith("_") and not node.attr.startswith("__"):
                    used[node.attr] = path.name
    assert "_transport" in used and "_transport" in defined  # the walk sees both sides (flow.ReadingFlow)
    borrowed = {name: where for name, where in used.items() if name not in defined}
    assert not borrowed, f"private names used but not defined in inferd.serving: {borrowed}"


@pytest.mark.parametrize(
    ("borrowed", "says"),
    [
        (
            internals.Borrowed("httptools:HttpRequestParser", "gone", "attr", "x"),
            "HttpRequestParser has no attribute 'gone'",
        ),
        (
            internals.Borrowed("httptools:HttpRequestParser.set_dangerous_leniencies", "gone", "param", "x"),
            "set_dangerous_leniencies takes no parameter 'gone'",
        ),
        (internals.Borrowed("zttp:Gone", "stream", "attr", "x"), "zttp:Gone is gone"),
    ],
)
def test_the_check_names_what_is_missing(borrowed: internals.Borrowed, says: str) -> None:
    (problem,) = internals.check([borrowed])
    assert says in problem and "inferd uses it in x" in problem or "needed for stream: x" in problem


def test_the_facade_imports_none_of_the_libraries() -> None:
    """``import inferd.serving`` (what plugin discovery does) loads no uvicorn, zttp or httptools."""
    libraries = ("uvicorn", *LIBRARIES)
    code = f"import sys, inferd.serving; print(sorted(m for m in sys.modules if m.split('.')[0] in {libraries!r}))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]", out


def test_the_versions_checked_are_the_versions_pinned() -> None:
    """internals.VERSIONS (what every borrowed name was read against) is what constraints.txt pins."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    assert {name: pins.get(name) for name in internals.VERSIONS} == internals.VERSIONS


def test_the_h1_protocol_is_inferd_s_own() -> None:
    """The HTTP/1.1 protocol is inferd's own asyncio.Protocol over httptools' parser."""
    from inferd.serving import h1

    bases = [f"{cls.__module__}.{cls.__qualname__}" for cls in h1.H1Protocol.__mro__]
    assert bases == ["inferd.serving.h1.H1Protocol", "asyncio.protocols.Protocol",
                     "asyncio.protocols.BaseProtocol", "builtins.object"]  # fmt: skip


def test_the_h2_protocol_subclasses_no_uvicorn_protocol() -> None:
    """gRPC's HTTP/2 protocol is inferd's own asyncio.BufferedProtocol over zttp's connection (it
    reads into its own memory: ``get_buffer``)."""
    from inferd.serving import h2

    bases = [f"{cls.__module__}.{cls.__qualname__}" for cls in h2.GrpcH2Protocol.__mro__]
    assert bases == ["inferd.serving.h2.GrpcH2Protocol", "asyncio.protocols.BufferedProtocol",
                     "asyncio.protocols.BaseProtocol", "builtins.object"]  # fmt: skip


def _events(conn: zttp.H2Connection) -> list[object]:
    events = []
    while type(event := conn.next_event()) is not zttp.NeedData:
        events.append(event)
    return events


def test_zttp_still_caps_a_connection_s_streams() -> None:
    """zttp's sans-IO H2Connection (not uvicorn's protocol) refuses its 4097th stream, closed ones
    counted: h2.STREAMS_PER_CONNECTION rotates connections before. When a zttp upgrade makes this
    fail, the rotation can go (and h2load -c1 -n 10000 completes on one connection)."""
    from inferd.serving import h2

    server, client = zttp.Connection(zttp.SERVER, zttp.HTTP2), zttp.Connection(zttp.CLIENT, zttp.HTTP2)
    server.initiate_connection()
    client.initiate_connection()
    headers = [(b"content-type", b"application/grpc"), (b"te", b"trailers")]
    answered = 0
    with pytest.raises(zttp.RemoteProtocolError, match="flood"):  # noqa: PT012 - streams open one by one until one is refused
        for _ in range(5000):
            client.send_request(b"POST", b"/x", b"localhost", headers).end_message()
            server.receive_data(client.data_to_send())
            for event in _events(server):
                if type(event) is zttp.Request:  # answered and closed at once
                    stream = server.stream(event.stream_id)
                    stream.send_response(200, headers[:1])
                    stream.end_message([(b"grpc-status", b"0")])
                    answered += 1
            client.receive_data(server.data_to_send())
            _events(client)
    assert answered == 4096 and answered > h2.STREAMS_PER_CONNECTION
