"""The serving package is the only importer of uvicorn, zttp and httptools, and every name it
borrows from them is listed in ``inferd.serving.internals`` and found in the installed versions."""

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
LIBRARIES = ("uvicorn", "zttp", "httptools")


def _imported_libraries(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, wherever the statement is (functions, TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_serving_package_imports_uvicorn_zttp_or_httptools() -> None:
    sources = [*(ROOT / "core" / "src").rglob("*.py"), *ROOT.glob("plugins/*/src/**/*.py")]
    assert len(sources) > 100 and any(SERVING in path.parents for path in sources)
    outside = {
        str(path.relative_to(ROOT)): sorted(libraries)
        for path in sources
        if SERVING not in path.parents and (libraries := _imported_libraries(path) & set(LIBRARIES))
    }
    assert not outside, f"only core/src/inferd/serving/ may import {', '.join(LIBRARIES)}: {outside}"


def test_every_borrowed_name_is_in_the_installed_libraries() -> None:
    problems = internals.check()
    assert not problems, "the serving package borrows what the installed libraries lack:\n" + "\n".join(problems)


def test_the_list_names_every_private_name_the_package_uses() -> None:
    """Each ``self._name`` the package's classes use but do not define is borrowed, so listed."""
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
    borrowed = {name: where for name, where in used.items() if name not in defined}
    assert "_start_asgi_task" in borrowed  # the check sees it
    listed = {item.name for item in internals.BORROWED}
    assert {"_serve", "_unset_keepalive_if_required"} <= listed
    unlisted = {name: where for name, where in borrowed.items() if name not in listed}
    assert not unlisted, f"private names used but not listed in inferd.serving.internals: {unlisted}"


@pytest.mark.parametrize(
    ("borrowed", "says"),
    [
        (internals.Borrowed(internals._H1, "_gone", "attr", "x"), "HttpToolsProtocol has no attribute '_gone'"),
        (internals.Borrowed(internals._H1, "gone", "self", "x"), "HttpToolsProtocol no longer sets self.gone"),
        (internals.Borrowed("uvicorn.config:Config", "gone", "param", "x"), "Config takes no parameter 'gone'"),
        (
            internals.Borrowed(internals._H1, "_gone", "calls", "x", "data_received"),
            "no longer calls self._gone() from data_received()",
        ),  # fmt: skip
        (internals.Borrowed("zttp:Gone", "stream", "attr", "x"), "zttp:Gone is gone"),
    ],
)
def test_the_check_names_what_is_missing(borrowed: internals.Borrowed, says: str) -> None:
    (problem,) = internals.check([borrowed])
    assert says in problem and "inferd uses it in x" in problem or "needed for stream: x" in problem


def test_the_facade_imports_none_of_the_libraries() -> None:
    """``import inferd.serving`` (what plugin discovery does) loads no uvicorn, zttp or httptools."""
    code = f"import sys, inferd.serving; print(sorted(m for m in sys.modules if m.split('.')[0] in {LIBRARIES!r}))"
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


def test_the_h2_protocol_subclasses_no_uvicorn_protocol() -> None:
    """gRPC's HTTP/2 protocol is inferd's own asyncio.Protocol over zttp's connection: nothing of
    uvicorn's in its classes (uvicorn only builds it and calls its ``shutdown``)."""
    from inferd.serving import h2

    bases = [f"{cls.__module__}.{cls.__qualname__}" for cls in h2.GrpcH2Protocol.__mro__]
    assert bases == ["inferd.serving.h2.GrpcH2Protocol", "asyncio.protocols.Protocol",
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
    with pytest.raises(zttp.RemoteProtocolError, match="flood"):
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
    assert answered == 4096 and h2.STREAMS_PER_CONNECTION < answered
