"""An isolated Python model that floods the log: its lines are cut to 16 KiB
characters and its records beyond its log budget dropped, counted in ``/metrics`` and reported.
Before: ``pb_utils.Logger.log_info('X' * 60000)`` in a loop wrote 210 MB of server log in 3 s."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.metrics_text import metric
from tests.python_models import python_model
from tests.servers import Servers

LINE_CHARS = 16 * 1024  # docs/security.md
#: The log a 3 s flood may add: a burst of 1 MiB and 256 KiB a second (3-4 MB however slowly the
#: flood and the summary run), where the old code wrote 210 MB.
MAX_GROWTH = 8 << 20


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"flood": python_model("isolated_flood")})


def _infer(client: httpclient.InferenceServerClient, n: int) -> int:
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    return int(client.infer("flood", [x]).as_numpy("OUT")[0])


def _metric(server: ServerProcess, name: str) -> float:
    return metric(server, name, model="flood", version="1")


def test_a_flood_of_long_lines_is_cut_dropped_counted_and_reported(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    before = server.log_path.stat().st_size
    assert _infer(client, 1) == 2  # the flood (its records reach the server before its response)
    grown = server.log_path.stat().st_size - before
    assert grown < MAX_GROWTH, f"the server log grew by {grown} bytes"
    assert _infer(client, 5) == 6  # the model still answers

    def summaries() -> int:
        log = server.log_path.read_bytes()[before:].decode(errors="replace")
        return sum(int(n) for n in re.findall(r"dropped (\d+) log lines from model 'flood' version 1: ", log))

    deadline = time.monotonic() + 60  # the last summary comes a second after the last drop
    while (dropped := _metric(server, "inferd_python_stub_log_lines_dropped_total")) == 0 or summaries() < dropped:
        assert time.monotonic() < deadline, (dropped, summaries(), server.log())
        time.sleep(0.2)
    assert summaries() == dropped > 0

    lines = server.log_path.read_bytes()[before:].decode(errors="replace").splitlines()
    kept = [line for line in lines if "XXXX" in line]
    assert kept, lines[-5:]
    marker = f"X… [truncated {60000 - LINE_CHARS} characters]"
    assert all(line.count("X") == LINE_CHARS and line.endswith(marker) for line in kept), kept[0][-200:]
    assert _metric(server, "inferd_python_stub_log_lines_truncated_total") == len(kept)
