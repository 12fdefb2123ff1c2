"""The dynamic batcher's preferred sizes and delay, end to end, as Triton 2.51 forms batches.

The Python model logs every ``execute`` call (the rows of each request in it), so the tests
assert on the batches formed, not on timings. A "blocker" request (8 rows, value -seconds) keeps
the only instance busy while the requests under test queue up, so the batcher sees them all at once
when the instance frees, as Triton's QA tests do with TRITONSERVER_DELAY_SCHEDULER. It frees the
instance well before the first queued request's delay ends (:data:`BLOCK_S`): when the two ended
together, which one the batcher saw first was a race (batches ``[3]`` instead of ``[2, 1]``). Each
expectation was checked against the real Triton 2.51 (CPU, Python backend) with the same model.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

MODEL_PY = source("parity_batching")

DELAY_US = 2_500_000
#: How long the blocker holds the instance: time for the requests under test to queue (0.1 s apart),
#: and a second short of :data:`DELAY_US`.
BLOCK_S = 1.5
MODELS = {
    "pref": f"preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: {DELAY_US}",
    "zero": "preferred_batch_size: [ 4, 6 ]",
}


def _config(name: str, batching: str, log: Path) -> str:
    return f"""
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ {batching} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "log" value: {{ string_value: "{log}" }} }}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("batching")
    models = {
        name: {"config.pbtxt": _config(name, body, root / f"{name}.jsonl"), "1/model.py": MODEL_PY}
        for name, body in MODELS.items()
    }
    srv = serve(models)
    srv.root = root  # type: ignore[attr-defined]
    return srv


def _infer(server: ServerProcess, model: str, rows: int, value: float) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    try:
        inp = httpclient.InferInput("INPUT0", [rows, 4], "FP32")
        inp.set_data_from_numpy(np.full((rows, 4), value, np.float32))
        client.infer(model, [inp])
    finally:
        client.close()


def _batches(server: ServerProcess, model: str) -> list[dict]:
    """The executions logged by ``model`` so far (and forget them)."""
    path: Path = server.root / f"{model}.jsonl"  # type: ignore[attr-defined]
    if not path.exists():
        return []
    out = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    return out


def _run(server: ServerProcess, model: str, rows: list[int], gap: float = 0.1, blocker: bool = True) -> list[dict]:
    """Send requests of ``rows`` rows ``gap`` s apart (behind a blocker when asked); their batches."""
    marker: Path = server.root / f"{model}.jsonl.blocked"  # type: ignore[attr-defined]
    marker.unlink(missing_ok=True)
    threads = []
    if blocker:
        threads.append(threading.Thread(target=_infer, args=(server, model, 8, -BLOCK_S)))
        threads[0].start()
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    for i, n in enumerate(rows):
        if i:
            time.sleep(gap)
        t = threading.Thread(target=_infer, args=(server, model, n, float(i + 1)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(120)
    batches = _batches(server, model)
    return batches[1:] if blocker else batches


def test_request_past_the_largest_preferred_size_is_held_for_the_delay(server):
    # batcher_test.py test_multi_batch_sum_gt_max_preferred: 3 rows, then 4 rows; 3 + 4 passes
    # the largest preferred size (6), so the 3 go at once and the 4 wait out the delay alone.
    # Triton 2.51: batches [3] then [4] (the second 2.5 s after it arrived); inferd before: [3, 4].
    batches = _run(server, "pref", [3, 4], gap=0.5, blocker=False)
    assert [b["rows"] for b in batches] == [[3], [4]]
    assert batches[1]["t"] - batches[0]["t"] > DELAY_US / 1e6 / 2


def test_largest_preferred_size_goes_first_and_the_rest_waits(server):
    # test_multi_batch_use_best_preferred / test_multi_batch_use_biggest_preferred
    assert [sum(b["rows"]) for b in _run(server, "pref", [1, 1, 1])] == [2, 1]
    assert [sum(b["rows"]) for b in _run(server, "pref", [1] * 6)] == [6]


def test_zero_delay_still_prefers_a_preferred_size(server):
    # test_preferred_batch_only_unaligned / _use_biggest_preferred / _use_no_preferred_size:
    # with no delay, the largest preferred size reachable goes first (inferd before: everything).
    assert [sum(b["rows"]) for b in _run(server, "zero", [1] * 5)] == [4, 1]
    assert [sum(b["rows"]) for b in _run(server, "zero", [1] * 7)] == [6, 1]
    assert [sum(b["rows"]) for b in _run(server, "zero", [1] * 3)] == [3]
