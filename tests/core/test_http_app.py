"""The HTTP application's dispatch of infer requests ahead of Starlette answers exactly as the
app's own router would: the infer routes are ordinary routes of one app."""

from __future__ import annotations

import json

from inferd.default_plugins.http.app import HttpApp
from inferd.server import Server
from tests.core.test_model_info import A, B, http_post, serve

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
