"""Every route and RPC has an API group, and the restricted-API flags guard each by it.

The calls are generated from the route tables (HTTP ``ROUTES`` and ``INFER_ROUTES``, the gRPC
``RPCS``, the OpenAI frontend's ``ROUTES``) and sent to one real server where every group is
restricted, each with a header of its own (``g-<group>``): a route answers the refusal that names
its own group's header (so it is protected, as the group its table says), and with that header it
is served (so it is reachable: its answer is no "no such route"). A new route added to a table is
checked by this test with no change to it; the gRPC services' .proto files are checked against
``RPCS`` too (an RPC left out of it would be unreachable).
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from inferd.auth import ApiGroup
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc import health_pb2, traffic_pb2
from inferd.frontends.grpc.service import RPCS, STREAM_RPC, Rpc
from inferd.frontends.http.app import INFER_ROUTES, ROUTES, HttpRoute
from inferd.testing import ServerProcess
from tests.servers import Servers

HTTP_SENTENCE = "This API is restricted, expecting header '{}'"
GRPC_SENTENCE = "This protocol is restricted, expecting header 'triton-grpc-protocol-{}'"
#: What each path parameter is filled with (no model is loaded: each answer comes before that matters).
PARAMS = {"model": "nomodel", "version": "1", "repo": "r", "region": "nosuchregion", "name": "noplot.svg"}
#: Starlette's answers to a request no route takes (the HTTP app's and the OpenAI app's words).
NO_ROUTE = ({"error": "Not Found"}, {"error": "Method Not Allowed"})


def header(group: ApiGroup) -> str:
    return f"g-{group.value}"


class RestrictedServer(ServerProcess):
    """A server whose health group is restricted too: its ports file says it listens (the health
    probes :meth:`ServerProcess.start` waits with would be refused)."""

    def wait_live(self, timeout: float = 120.0) -> None:
        pass

    def wait_ready(self, timeout: float = 120.0) -> None:
        pass


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    flags = [f"--http-restricted-api={g.value}:{header(g)}=yes" for g in ApiGroup]
    flags += [f"--grpc-restricted-protocol={g.value}:{header(g)}=yes" for g in ApiGroup]
    args = ["--grpc-transport", request.param, "--model-control-mode=explicit", "--openai-port", "0",
            "--openai-address", "127.0.0.1", *flags]  # fmt: skip
    with serve({}, *args, kind=RestrictedServer) as proc:
        yield proc


def concrete(path: str) -> str:
    """``path`` with its parameters (``{model}``, ``{version:int}``...) filled in."""
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PARAMS[m.group(1)], path)


def send(port: int, method: str, path: str, headers: dict[str, str], chunked: bool = False) -> tuple[int, str, Any]:
    """One request on its own connection (a ``{}`` body for a POST): status, content type, JSON body
    (the text of an HTML or plain-text one: the status page, a Prometheus scrape)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body: Any = (iter([b"{}"]) if chunked else b"{}") if method == "POST" else None
        conn.request(method, path, body=body, headers=headers, encode_chunked=chunked)
        response = conn.getresponse()
        data = response.read()
        content_type = response.getheader("content-type", "")
        if content_type.startswith("text/html"):
            return response.status, content_type, data.decode()
        try:
            return response.status, content_type, json.loads(data) if data else None
        except ValueError:  # a Prometheus scrape (the OpenAI port's /metrics)
            return response.status, content_type, data.decode()
    finally:
        conn.close()


def _route_id(route: HttpRoute) -> str:
    return f"{route.method or 'POST'} {route.path}"


@pytest.mark.parametrize("route", [*ROUTES, *INFER_ROUTES], ids=_route_id)
def test_every_http_route_is_refused_as_its_group_and_served_with_its_header(server, route):
    path, method = concrete(route.path), route.method or "POST"
    status, content_type, body = send(server.http_port, method, path, {})
    assert (status, content_type, body) == (403, "text/plain", {"error": HTTP_SENTENCE.format(header(route.group))})
    status, _, body = send(server.http_port, method, path, {header(route.group): "yes"})
    assert body not in NO_ROUTE and not (status == 403 and "is restricted" in str(body)), (status, body)


@pytest.mark.parametrize("route", INFER_ROUTES, ids=_route_id)
def test_the_infer_routes_over_asgi_are_refused_as_their_group(server, route):
    """A chunked body is not taken by the direct path: the request goes through the ASGI app."""
    path = concrete(route.path)
    status, content_type, body = send(server.http_port, "POST", path, {}, chunked=True)
    assert (status, content_type, body) == (403, "text/plain", {"error": HTTP_SENTENCE.format(header(route.group))})
    status, _, body = send(server.http_port, "POST", path, {header(route.group): "yes"}, chunked=True)
    assert status == 400 and body not in NO_ROUTE, (status, body)  # served: the body is no infer request


def _openai_routes() -> list[tuple[str, str, str, ApiGroup]]:
    try:
        from inferd_frontend_openai.app import ROUTES as OPENAI_ROUTES
    except ImportError:  # the plugin is not installed: nothing to check
        return []
    return list(OPENAI_ROUTES)


@pytest.mark.parametrize("route", _openai_routes(), ids=lambda r: f"{r[1]} {r[0]}")
def test_every_openai_route_is_refused_as_its_group_and_served_with_its_header(server, route):
    path, method, _, group = route
    port = server.ports["openai"]
    status, _, body = send(port, method, concrete(path), {})
    assert status == 403 and body["error"]["message"] == HTTP_SENTENCE.format(header(group))
    assert body["error"]["code"] == "permission_denied"
    status, _, body = send(port, method, concrete(path), {header(group): "yes"})
    assert status != 403, body
    assert status < 400 or not body["error"]["message"].startswith(("Invalid URL", "Method ")), body


def _call(server: ServerProcess, rpc: Rpc, metadata: tuple[tuple[str, str], ...]) -> None:
    """Call ``rpc`` with an empty request (raises ``grpc.RpcError`` when the call fails)."""
    request = rpc.request or pb.ModelInferRequest
    response = rpc.response or (pb.ModelStreamInferResponse if rpc is STREAM_RPC else pb.ModelInferResponse)
    with grpc.insecure_channel(server.grpc_url) as channel:
        if rpc is STREAM_RPC:
            call = channel.stream_stream(rpc.path, request.SerializeToString, response.FromString)
            list(call(iter([request()]), metadata=metadata, timeout=30))
        else:
            channel.unary_unary(rpc.path, request.SerializeToString, response.FromString)(
                request(), metadata=metadata, timeout=30
            )


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.path)
def test_every_rpc_is_refused_as_its_group_and_served_with_its_header(server, rpc):
    with pytest.raises(grpc.RpcError) as exc:
        _call(server, rpc, ())
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert exc.value.details() == GRPC_SENTENCE.format(header(rpc.group))
    details = ""
    try:
        _call(server, rpc, ((f"triton-grpc-protocol-{header(rpc.group)}", "yes"),))
    except grpc.RpcError as error:  # an empty request may be refused, but not as restricted or unknown
        details = error.details()
    assert "is restricted" not in details and details != "Method not found!", details


@pytest.mark.parametrize(
    ("module", "service", "served"),
    [(pb, "GRPCInferenceService", "inference.GRPCInferenceService"), (health_pb2, "Health", "grpc.health.v1.Health"),
     (traffic_pb2, "Traffic", "inferd.Traffic")],
)  # fmt: skip
def test_every_rpc_of_the_services_protos_is_in_the_table(module, service, served):
    methods = {m.name for m in module.DESCRIPTOR.services_by_name[service].methods}
    assert methods == {rpc.name for rpc in RPCS if rpc.service == served}
