"""``--routing-metrics``: a live server's ``/metrics`` read by the endpoint picker's rules (the
Gateway API Inference Extension) while a Python model holds requests, so the queue is known: the
pod's pending and executed totals come first and equal what the test counts (one model, several,
and ``--workers 2``); the per-model series still select one model; the text stays valid."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.python_models import source
from tests.router_rules import families, picker_value
from tests.servers import Servers
from tests.waiting import wait_for

GATE_PY = source("routing_gate")
PENDING, EXECS = "nv_inference_pending_request_count", "nv_inference_exec_count"


def _config(name: str, folder: Path) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
"""


def _repo(root: Path, *names: str) -> dict[str, dict[str, str]]:
    root.mkdir(parents=True, exist_ok=True)
    return {name: {"config.pbtxt": _config(name, root), "1/model.py": GATE_PY} for name in names}


def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30) as response:
        return response.read().decode()


class _Held:
    """Requests sent from threads to models that hold them until ``release``."""

    def __init__(self, server: ServerProcess, folder: Path) -> None:
        self.server, self.folder = server, folder
        self.threads: list[threading.Thread] = []
        self.statuses: list[int] = []

    def send(self, model: str, n: int) -> None:
        body = b'{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[7]}]}'
        url = f"http://{self.server.http_url}/v2/models/{model}/infer"
        for _ in range(n):
            thread = threading.Thread(target=lambda: self.statuses.append(http_call(url, "POST", body, timeout=120)[0]))
            thread.start()
            self.threads.append(thread)

    def started(self) -> int:
        """Requests an instance executes now (each wrote its file when it started)."""
        return len(list(self.folder.glob("started-*")))

    def release(self) -> None:
        (self.folder / "release").touch()
        for thread in self.threads:
            thread.join(120)
        assert self.statuses == [200] * len(self.threads)


def _wait_figures(server: ServerProcess, held: _Held, sent: int, executing: int) -> str:
    """The scrape once ``executing`` requests run and the picker reads ``sent - executing`` queued."""
    wait_for(lambda: held.started() == executing, timeout=60, what=f"{executing} held requests executing")
    text = ""

    def settled() -> bool:
        nonlocal text
        text = _scrape(server)
        return picker_value(text, PENDING) == sent - executing

    wait_for(settled, timeout=60, what=f"the picker's {PENDING} at {sent - executing}")
    return text


def test_one_model_pod_figures_first(tmp_path: Path, serve: Servers) -> None:
    server = serve(_repo(tmp_path / "gate", "gate"), "--routing-metrics=true")
    held = _Held(server, tmp_path / "gate")
    held.send("gate", 4)
    text = _wait_figures(server, held, sent=4, executing=1)
    assert picker_value(text, f"{PENDING}{{model=gate,version=1}}") == 3
    assert picker_value(text, EXECS) == 0
    held.release()
    text = _scrape(server)
    assert picker_value(text, PENDING) == 0
    assert picker_value(text, EXECS) == 4


def test_several_models_sum_with_one_models_series_selectable(tmp_path: Path, serve: Servers) -> None:
    server = serve(_repo(tmp_path / "gates", "gate_a", "gate_b"), "--routing-metrics=true")
    held = _Held(server, tmp_path / "gates")
    held.send("gate_a", 3)
    held.send("gate_b", 2)
    text = _wait_figures(server, held, sent=5, executing=2)
    assert picker_value(text, f"{PENDING}{{model=gate_a}}") == 2
    assert picker_value(text, f"{PENDING}{{model=gate_b}}") == 1
    series = families(text)[PENDING]
    assert series[0].labels == {} and [s.labels["model"] for s in series[1:]] == ["gate_a", "gate_b"]
    held.release()
    text = _scrape(server)
    assert picker_value(text, EXECS) == 5
    assert picker_value(text, f"{EXECS}{{model=gate_a}}") == 3
    assert picker_value(text, f"{EXECS}{{model=gate_b}}") == 2


def test_two_workers_add_up_their_queues_and_executions(tmp_path: Path, serve: Servers) -> None:
    server = serve(_repo(tmp_path / "w", "gate"), "--routing-metrics=true", "--workers=2")
    held = _Held(server, tmp_path / "w")
    held.send("gate", 6)
    # Each worker runs its own instance; the kernel spreads the connections, so 1 or 2 execute.
    wait_for(lambda: held.started() >= 1, timeout=60, what="a held request executing")
    text = ""

    def settled() -> bool:
        nonlocal text
        text = _scrape(server)
        return picker_value(text, PENDING) == 6 - held.started()

    wait_for(settled, timeout=60, what="the pod's pending count at the requests not executing")
    assert picker_value(text, f"{PENDING}{{model=gate}}") == 6 - held.started()
    held.release()
    for _ in range(3):  # whichever worker answers the scrape
        assert picker_value(_scrape(server), EXECS) == 6


def test_without_the_flag_the_families_are_tritons(tmp_path: Path, serve: Servers) -> None:
    server = serve(_repo(tmp_path / "plain", "gate"))
    series = families(_scrape(server))[PENDING]
    assert [s.labels for s in series] == [{"model": "gate", "version": "1"}]


@pytest.mark.parametrize("value", ["maybe", ""])
def test_a_bad_flag_value_is_refused(tmp_path: Path, value: str) -> None:
    command = [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(tmp_path),
               f"--routing-metrics={value}"]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert f"argument --routing-metrics: expected true or false, got '{value}'" in out.stderr
