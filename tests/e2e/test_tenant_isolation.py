"""A flooding tenant does not take another tenant's share: its requests over its limits are refused
before they reach a model (the model executes only what was admitted) and the polite tenant's
requests all succeed meanwhile. What that does to the polite tenant's latency is measured, beside
the real Triton, by ``benchmarks/tenant_priority.py``: a timed assertion here would fail on a busy
machine for reasons that are not the server's."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest

from inferd.auth import digest
from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers

#: The flooding tenant's limits: 20 requests a second, 20 at once after a pause, one in flight.
RATE, BURST = 20, 20
#: How long the flood lasts at least, the refusals it waits for (a machine too busy to send faster
#: than the rate sees them later), and when it gives up.
FLOOD_S, REFUSALS, GIVE_UP_S = 3.0, 60, 30.0

FLOOD = """
import http.client, sys, time
url, body = sys.argv[1], sys.argv[2].encode()
least, refusals, most = map(float, sys.argv[3:])
counts = {200: 0, 429: 0}
conn = http.client.HTTPConnection(url, timeout=30)
start = time.monotonic()
while (elapsed := time.monotonic() - start) < most and (elapsed < least or counts[429] < refusals):
    conn.request("POST", "/v2/models/add_sub/infer", body=body, headers={"Authorization": "Bearer flood-key"})
    response = conn.getresponse(); response.read()
    counts[response.status] = counts.get(response.status, 0) + 1
    time.sleep(0.006)  # ~100 requests/s: 5x the tenant's rate, without starving the 2 cores
print(counts[200], counts[429], sum(counts.values()) - counts[200] - counts[429], time.monotonic() - start)
"""


def _body() -> str:
    tensor = {"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    return json.dumps({"inputs": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    auth = tmp_path_factory.mktemp("isolation") / "auth.json"
    config = {"tenants": {"flood": {"keys": [digest("flood-key")], "rate": RATE, "burst": BURST, "concurrency": 1},
                          "polite": {"keys": [digest("polite-key")]}}}  # fmt: skip
    auth.write_text(json.dumps(config))
    return serve({"add_sub": models.add_sub()}, f"--auth-config={auth}")


def _polite(server: ServerProcess, count: int) -> None:
    """``count`` requests of the polite tenant, one after another; each must succeed."""
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    body, headers = _body().encode(), {"Authorization": "Bearer polite-key"}
    for _ in range(count):
        conn.request("POST", "/v2/models/add_sub/infer", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    conn.close()


def _inference_count(server: ServerProcess) -> int:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("GET", "/v2/models/add_sub/stats", headers={"Authorization": "Bearer polite-key"})
    response = conn.getresponse()
    stats = json.loads(response.read())
    assert response.status == 200, stats
    conn.close()
    return int(stats["model_stats"][0]["inference_count"])


def test_a_flooding_tenant_does_not_reach_the_model_beyond_its_limits(server):
    _polite(server, 20)
    before = _inference_count(server)
    args = [server.http_url, _body(), str(FLOOD_S), str(REFUSALS), str(GIVE_UP_S)]
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, *args], stdout=subprocess.PIPE, text=True)
    polite = 0
    while flood.poll() is None:  # the polite tenant keeps calling while the flood lasts
        _polite(server, 10)
        polite += 10
    out, _ = flood.communicate(timeout=60)
    admitted, refused, other, seconds = map(float, out.split())
    assert other == 0, out  # each request was admitted or refused for its rate
    assert refused >= REFUSALS, out  # it did flood: its requests went over its limits
    assert 0 < admitted <= BURST + RATE * seconds + 1, out  # its burst, then its rate, while it lasted
    assert _inference_count(server) - before == polite + admitted  # the refused ones never reached the model
