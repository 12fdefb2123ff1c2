"""The HTTP application's dispatch of infer requests ahead of Starlette answers exactly as the
app's own router would: the infer routes are ordinary routes of one app."""

from __future__ import annotations

import json

import numpy as np

from inferd.frontends.http import infer as infer_module
from inferd.frontends.http.app import HttpApp
from inferd.host.server import Server
from tests.asgi_calls import http_post
from tests.in_process import A, B, serve

INFER = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": d}
                               for n, d in (("INPUT0", A), ("INPUT1", B))]}).encode()  # fmt: skip


def test_infer_dispatch_answers_as_the_router_does(tmp_path):
    async def scenario(server: Server) -> None:
        app = HttpApp(server.dataplane)
        cases = [
            ("POST", "/v2/models/add_sub/infer", INFER, 200),
            ("POST", "/v2/models/add_sub/versions/1/infer", INFER, 200),
            ("POST", "/v2/models/add_sub/versions/01/infer", INFER, 200),
            ("POST", "/v2/models/add_sub/versions/7/infer", INFER, 404),
            ("POST", "/v2/models/add_sub/versions/one/infer", INFER, 404),
            ("POST", "/v2/models/add_sub/infer", b"{", 400),
            ("GET", "/v2/models/add_sub/infer", b"", 405),
        ]
        for method, path, body, status in cases:
            dispatched = await http_post(app, path, body, method)
            routed = await http_post(app.app, path, body, method)  # Starlette's router alone
            assert dispatched == routed, path
            assert dispatched[0] == status, (path, dispatched)
        assert json.loads(routed[1]) == {"error": "Method Not Allowed"}

    serve(tmp_path, scenario)


def _binary_infer() -> tuple[bytes, bytes]:
    raw = b"".join(np.array([v], dtype=np.float32).tobytes() for v in (A, B))
    head = json.dumps({
        "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}
                   for n in ("INPUT0", "INPUT1")],
        "parameters": {"binary_data_output": True},
    }).encode()  # fmt: skip
    return head, raw


async def _post_binary(app: HttpApp) -> list[dict]:
    head, raw = _binary_infer()
    scope = {"type": "http", "method": "POST", "path": "/v2/models/add_sub/versions/1/infer", "root_path": "",
             "headers": [(b"inference-header-content-length", str(len(head)).encode())]}  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": head + raw, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_small_binary_responses_are_one_body_large_ones_parts_with_the_same_bytes(tmp_path, monkeypatch):
    async def scenario(server: Server) -> tuple[list[dict], list[dict]]:
        app = HttpApp(server.dataplane)
        joined = await _post_binary(app)
        monkeypatch.setattr(infer_module, "JOIN_LIMIT", 0)
        return joined, await _post_binary(app)

    results: list[tuple[list[dict], list[dict]]] = []

    async def run(server: Server) -> None:
        results.append(await scenario(server))

    serve(tmp_path, run)
    joined, parted = results[0]
    assert [m["type"] for m in joined] == ["http.response.start", "http.response.body"]
    assert [m.get("more_body", False) for m in parted[1:]] == [True] * (len(parted) - 2) + [False]
    assert len(parted) > 2
    assert joined[0] == parted[0]
    body = b"".join(bytes(m["body"]) for m in joined[1:])
    assert body == b"".join(bytes(m["body"]) for m in parted[1:])
    headers = dict(joined[0]["headers"])
    assert int(headers[b"content-length"]) == len(body)
    head_length = int(headers[b"inference-header-content-length"])
    outputs = json.loads(body[:head_length])["outputs"]
    arrays = {}
    offset = head_length
    for out in outputs:
        size = out["parameters"]["binary_data_size"]
        arrays[out["name"]] = np.frombuffer(body[offset : offset + size], dtype=np.float32)
        offset += size
    a, b = np.array(A, np.float32), np.array(B, np.float32)
    assert arrays["OUTPUT0"].tolist() == (a + b).tolist()
    assert arrays["OUTPUT1"].tolist() == (a - b).tolist()
