"""Triton's rate limiter (``--rate-limit=execution_count``) against a real ``inferd serve``.

Python models record when each execution starts and ends (wall clock, in a shared file) and
sleep as long as their input says; the tests read those intervals back. Checked against Triton
2.51: two models whose instances share a resource of count 1 never execute at the same time.
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

from inferd.testing import ServerProcess, write_repository
from tests.servers import Servers

RECORDER = """
import json
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]

    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            start = time.time()
            with open("{log}", "a") as f:
                f.write(json.dumps({{"instance": self.name, "started": start}}) + "\\n")
            time.sleep(float(a[0]))
            with open("{log}", "a") as f:
                f.write(json.dumps({{"instance": self.name, "start": start, "end": time.time()}}) + "\\n")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]))
        return out
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} {limiter} }} ]
"""


def _model(log: Path, count: int, resources: str = "", priority: int = 0) -> dict[str, str]:
    limiter = f"rate_limiter {{ resources [ {resources} ] priority: {priority} }}" if resources else ""
    return {"config.pbtxt": CONFIG.format(count=count, limiter=limiter), "1/model.py": RECORDER.format(log=log)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rate_limiter")
    log = root / "calls.jsonl"
    shared = '{ name: "R" count: 1 }'
    models = {
        "a": _model(log, 2, shared),  # a and b: two instances each, all four holding R (one unit)
        "b": _model(log, 2, shared),
        "blocker": _model(log, 1, '{ name: "P" count: 1 }', 1),
        "hi": _model(log, 1, '{ name: "P" count: 1 }', 1),
        "lo": _model(log, 1, '{ name: "P" count: 1 }', 2),
        "pair": _model(log, 3, '{ name: "Q" global: true count: 1 }'),  # Q has 2 units: two of three run
        "greedy": _model(log, 1, '{ name: "Q" global: true count: 5 }'),  # more than Q has: refused
        "free": _model(log, 2),  # no resources: never waits
    }
    return write_repository(root / "models", models), log


@pytest.fixture(scope="module")
def limited(repo: tuple[Path, Path], serve: Servers) -> ServerProcess:
    args = ["--rate-limit=execution_count", "--rate-limit-resource=Q:2", "--exit-on-error=false",
            "--strict-readiness=false"]  # fmt: skip
    srv = serve(repo[0], *args)
    index = {m["name"]: m for m in httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
    unready = {name: m.get("reason") for name, m in index.items() if name != "greedy" and m["state"] != "READY"}
    assert not unready, f"models that failed to load (greedy should, alone): {unready}\n{srv.log()}"
    return srv


def _infer(url: str, model: str, seconds: float, protocol: str = "http") -> None:
    data = np.array([seconds], np.float32)
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(url)
    tensor = lib.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def _concurrently(srv: ServerProcess, calls: list[tuple[str, float]], gap: float = 0.0) -> None:
    threads = []
    for i, (model, seconds) in enumerate(calls):
        protocol = "grpc" if i % 2 else "http"
        url = srv.grpc_url if protocol == "grpc" else srv.http_url
        threads.append(threading.Thread(target=_infer, args=(url, model, seconds, protocol)))
        threads[-1].start()
        time.sleep(gap)
    for thread in threads:
        thread.join(60)


def _calls(log: Path, prefix: tuple[str, ...]) -> list[dict[str, float | str]]:
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return sorted((c for c in calls if "end" in c and str(c["instance"]).startswith(prefix)), key=lambda c: c["start"])


def _wait_started(log: Path, instance: str) -> None:
    """Poll the models' log until ``instance`` has started an execution."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and f'"instance": "{instance}", "started"' in log.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{instance} never started")


def _most_at_once(calls: list[dict[str, float | str]]) -> int:
    """The largest number of executions running at one moment (intervals' sweep)."""
    edges = sorted([(float(c["start"]), 1) for c in calls] + [(float(c["end"]), -1) for c in calls])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_instances_sharing_a_resource_never_overlap_across_models(limited, repo):
    log = repo[1]
    _concurrently(limited, [("a", 0.3), ("b", 0.3), ("a", 0.3), ("b", 0.3)])
    calls = _calls(log, ("a_", "b_"))
    assert len(calls) == 4 and {str(c["instance"])[0] for c in calls} == {"a", "b"}
    assert _most_at_once(calls) == 1
    for first, second in zip(calls, calls[1:], strict=False):
        assert second["start"] >= first["end"]  # each waited for the one before it


def test_priority_decides_who_goes_first_when_the_resource_frees(limited, repo):
    log = repo[1]
    # blocker holds P; lo asks first, then hi; when P frees, hi (priority 1) runs before lo (2).
    blocker = threading.Thread(target=_infer, args=(limited.http_url, "blocker", 1.5))
    blocker.start()
    _wait_started(log, "blocker_0_0")
    _concurrently(limited, [("lo", 0.05), ("hi", 0.05)], gap=0.25)
    blocker.join(60)
    calls = {str(c["instance"]).split("_")[0]: c for c in _calls(log, ("blocker_", "hi_", "lo_"))}
    assert float(calls["blocker"]["end"]) <= float(calls["hi"]["start"]) <= float(calls["lo"]["start"])
    assert float(calls["hi"]["end"]) <= float(calls["lo"]["start"])


def test_an_explicit_resource_count_lets_that_many_run_and_refuses_a_bigger_need(limited, repo):
    log = repo[1]
    _concurrently(limited, [("pair", 0.4)] * 3)
    calls = _calls(log, ("pair_",))
    assert len(calls) == 3 and _most_at_once(calls) == 2
    client = httpclient.InferenceServerClient(limited.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["greedy"]["state"] == "UNAVAILABLE"
    assert index["greedy"]["reason"] == (  # Triton 2.51's sentence, then ours
        'Resource count for "Q" is limited to 2 which will prevent scheduling of one or more model instances, '
        "the minimum required count is 5 (model 'greedy' version 1 instance 'greedy_0_0' needs 5 of global "
        "resource 'Q'; raise --rate-limit-resource=Q:<count>)"
    )
    assert client.is_server_live() and client.is_model_ready("a")


def test_instances_without_resources_do_not_wait(limited, repo):
    log = repo[1]
    _concurrently(limited, [("free", 0.8), ("free", 0.8)])
    assert _most_at_once(_calls(log, ("free_",))) == 2


def test_with_the_limiter_off_the_same_instances_overlap(repo, tmp_path):
    root, log = repo
    with ServerProcess([root], ["--exit-on-error=false", "--strict-readiness=false"]) as srv:
        started = len(_calls(log, ("a_", "b_")))
        _concurrently(srv, [("a", 0.8), ("b", 0.8), ("a", 0.8), ("b", 0.8)])
        calls = _calls(log, ("a_", "b_"))[started:]
        assert _most_at_once(calls) == 4
        index = {m["name"]: m for m in httpclient.InferenceServerClient(srv.http_url).get_model_repository_index()}
        assert index["greedy"]["state"] == "READY"  # off: rate_limiter configs are ignored


def test_a_malformed_resource_flag_is_refused(repo):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(repo[0]),
                           "--rate-limit-resource=R:many"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--rate-limit-resource option format is '<resource_name>:<count>:<device>'" in done.stderr
