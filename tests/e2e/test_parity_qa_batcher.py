"""The dynamic batcher under a large ``max_queue_delay_microseconds``, with preferred sizes and
priority levels, as Triton's QA (``qa/L0_batcher/batcher_test.py``) sees it: the delayed response
of ``test_multi_batch_delayed_sum_gt_max_preferred`` and its two batch sizes in the statistics,
against a real ``inferd serve`` with tritonclient.

The Python model logs each execution (the requests' ids, i.e. their first value, and rows); a
"blocker" request (8 rows, value -1.5) holds the only instance so that the requests under test
queue, as QA's TRITONSERVER_DELAY_SCHEDULER does. Every expected batch below is what the real
Triton 2.51 formed with the same model, config and requests (times from the first request sent,
delay 4 s): see each test's comment.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

DELAY_S = 4.0
BLOCK_S = 1.5
CONFIG = """
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: {delay} {extra} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "log" value: {{ string_value: "{log}" }} }}
"""
MODELS = {"plain": "", "prio": "priority_levels: 2 default_priority_level: 2"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("qa_batcher")
    repo = {
        name: {"config.pbtxt": CONFIG.format(delay=int(DELAY_S * 1e6), extra=extra, log=root / f"{name}.jsonl"),
               "1/model.py": source("parity_batching")}
        for name, extra in MODELS.items()
    }  # fmt: skip
    srv = serve(repo)
    srv.root = root  # type: ignore[attr-defined]
    return srv


def _infer(server: ServerProcess, model: str, rows: int, value: float, priority: int, done: dict[float, float],
           start: float) -> None:  # fmt: skip
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    tensor = httpclient.InferInput("INPUT0", [rows, 4], "FP32")
    tensor.set_data_from_numpy(np.full((rows, 4), value, np.float32))
    client.infer(model, [tensor], **({"priority": priority} if priority else {}))
    done[value] = time.monotonic() - start
    client.close()


def _run(server: ServerProcess, model: str, requests: list[tuple[int, int]], blocker: bool = True,
         gap: float = 0.1) -> tuple[list[list[float]], dict[float, float]]:  # fmt: skip
    """Send ``requests`` ((rows, priority); request i has the value i + 1) ``gap`` s apart, behind
    a blocker when asked: the ids of each batch executed after it, and when each request was answered."""
    log: Path = server.root / f"{model}.jsonl"  # type: ignore[attr-defined]
    log.unlink(missing_ok=True)
    Path(f"{log}.blocked").unlink(missing_ok=True)
    done: dict[float, float] = {}
    start = time.monotonic()
    threads = []
    if blocker:
        threads.append(threading.Thread(target=_infer, args=(server, model, 8, -BLOCK_S, 0, done, start)))
        threads[0].start()
        deadline = time.monotonic() + 60
        while not Path(f"{log}.blocked").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    for i, (rows, priority) in enumerate(requests):
        if i:
            time.sleep(gap)
        thread = threading.Thread(target=_infer, args=(server, model, rows, float(i + 1), priority, done, start))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(120)
    batches = [json.loads(line)["ids"] for line in log.read_text().splitlines()]
    return (batches[1:] if blocker else batches), done


def test_the_delayed_response_and_its_two_batch_sizes(server: ServerProcess) -> None:
    """test_multi_batch_delayed_sum_gt_max_preferred: 3 rows, then 4 rows 1 s later; 3 + 4 passes
    the largest preferred size, so the 3 go when the 4 arrive and the 4 wait out the delay alone.
    Triton 2.51: batches [3] at 1.0 s and [4] at 5.0 s; statistics: batch sizes {3: 1, 4: 1}, 2
    executions, 7 inferences."""
    batches, done = _run(server, "plain", [(3, 0), (4, 0)], blocker=False, gap=1.0)
    assert batches == [[1.0], [2.0]]
    assert done[1.0] < DELAY_S / 2 and done[2.0] > 1.0 + DELAY_S * 0.9, done
    stats = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics("plain", "1").model_stats[0]
    assert {b.batch_size: b.compute_infer.count for b in stats.batch_stats} == {3: 1, 4: 1}
    assert (stats.execution_count, stats.inference_count) == (2, 7)


def test_behind_a_busy_instance_the_rest_waits_the_delay(server: ServerProcess) -> None:
    """QA's TRITONSERVER_DELAY_SCHEDULER=2 form: both queued when the instance frees.
    Triton 2.51: [3] at once, [4] DELAY_S after it arrived."""
    batches, done = _run(server, "plain", [(3, 0), (4, 0)])
    assert batches == [[1.0], [2.0]]
    assert done[1.0] < BLOCK_S + 1 and done[2.0] > DELAY_S * 0.9, done


def test_the_higher_priority_goes_first_and_the_lower_waits(server: ServerProcess) -> None:
    """priority_levels 2: 3 rows at priority 2, then 4 rows at priority 1, behind a blocker.
    Triton 2.51: [4] (priority 1) at once, [3] when its delay ends."""
    batches, done = _run(server, "prio", [(3, 2), (4, 1)])
    assert batches == [[2.0], [1.0]]
    assert done[2.0] < BLOCK_S + 1 and done[1.0] > DELAY_S * 0.9, done


def test_a_preferred_size_is_filled_by_priority(server: ServerProcess) -> None:
    """One row each at priorities 2, 1, 2: Triton 2.51 sends [priority 1, first priority 2] (the
    preferred size 2) at once, the last when its delay ends. Seven rows, three at priority 2 then
    four at priority 1: the four, then two of priority 2 (preferred size 6), the last one delayed."""
    batches, done = _run(server, "prio", [(1, 2), (1, 1), (1, 2)])
    assert batches == [[2.0, 1.0], [3.0]]
    assert done[3.0] > DELAY_S * 0.9, done
    batches, done = _run(server, "prio", [(1, 2)] * 3 + [(1, 1)] * 4)
    assert batches == [[4.0, 5.0, 6.0, 7.0, 1.0, 2.0], [3.0]]
    assert done[3.0] > DELAY_S * 0.9, done


def test_without_a_blocker_a_later_higher_priority_request_goes_at_once(server: ServerProcess) -> None:
    """3 rows at priority 2, 1 s later 4 rows at priority 1: Triton 2.51 runs the 4 at 1.0 s and
    the 3 when their delay ends (4.0 s); with the priorities swapped, the 3 at 1.2 s, the 4 at 4.0 s."""
    batches, done = _run(server, "prio", [(3, 2), (4, 1)], blocker=False, gap=1.0)
    assert batches == [[2.0], [1.0]]
    assert done[2.0] < DELAY_S / 2 and done[1.0] > DELAY_S * 0.9, done
    batches, done = _run(server, "prio", [(4, 2), (3, 1)], blocker=False, gap=1.0)
    assert batches == [[2.0], [1.0]]
    assert done[2.0] < DELAY_S / 2 and done[1.0] > DELAY_S * 0.9, done
