"""inferd inside Ray Serve (plugins/serve_ray): a local Ray cluster with two replicas behind Ray's
HTTP proxy, asked with tritonclient with and without a multiplexed model id; routing stats against
the replica's real queue; one replica killed under traffic, replaced, and no request lost but
those in flight when it died.

One Ray cluster for the module (its start is most of the time: about 30 s here, 2 cores)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import free_port, write_repository
from tests.lazy import lazy_import
from tests.python_models import python_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Using extra keyword arguments on `Field`:DeprecationWarning"),  # Ray's pydantic
]

SKIP = "ray[serve] is not installed (make install installs it with plugins/serve_ray)"
ray = lazy_import("ray", skip=SKIP)
ray_serve = lazy_import("ray.serve", skip=SKIP)
serve_ray = lazy_import("inferd_serve_ray", skip=SKIP)

DOUBLE = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
#: Loaded in every replica at start: requests without a multiplexed model id reach it anywhere.
PINNED = "add_sub"
#: Loaded on demand by multiplexed model id, at most one of them per replica at a time.
ON_DEMAND = ("sleep", "double", "double_b")
MODEL_ID = "serve_multiplexed_model_id"


@dataclass
class Cluster:
    url: str  # host:port of Ray's HTTP proxy
    handle: Any  # the application's DeploymentHandle

    def client(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.url, network_timeout=60)

    def replicas(self, count: int = 2, timeout: float = 120) -> dict[str, dict[str, Any]]:
        """``{actor name: routing stats}`` of ``count`` running replicas (waits for Ray to have them)."""
        deadline = time.monotonic() + timeout
        while True:
            names = {self.handle.options(method_name="replica_actor_name").remote().result() for _ in range(4 * count)}
            alive = {}
            for name in names:
                try:
                    actor = ray.get_actor(name, namespace="serve")
                    alive[name] = ray.get(actor.record_routing_stats.remote(), timeout=10)
                except Exception:  # a replica stopping: asked again below
                    continue
            if len(alive) >= count:
                return alive
            assert time.monotonic() < deadline, f"Ray has {sorted(alive)}, not {count} replicas"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    models = {
        PINNED: python_model("add_sub"),
        "sleep": python_model("sleep"),
        "double": python_model("double", DOUBLE),
        "double_b": python_model("double", DOUBLE),
    }
    repo = write_repository(tmp_path_factory.mktemp("ray") / "models", models)
    port = free_port()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
        argv = ["--model-repository", str(repo), "--model-control-mode", "explicit", "--load-model", PINNED]
        settings = serve_ray.RaySettings(replicas=2, max_models_per_replica=1, routing_stats_period_s=0.5)
        handle = ray_serve.run(serve_ray.application(argv, settings), name="inferd", route_prefix="/")
        yield Cluster(f"127.0.0.1:{port}", handle)
    finally:
        ray_serve.shutdown()
        ray.shutdown()


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[httpclient.InferInput]:
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def double_inputs(x: np.ndarray) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def test_kserve_v2_without_a_model_id_reaches_every_replica(cluster: Cluster) -> None:
    client = cluster.client()
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(PINNED)
    assert client.get_model_metadata(PINNED)["inputs"][0]["name"] == "INPUT0"
    rng = np.random.default_rng(7)
    for _ in range(8):  # Ray spreads them over both replicas; each has the model loaded
        a, b = rng.random((2, 1, 4), dtype=np.float32)
        result = client.infer(PINNED, add_sub_inputs(a, b))
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    with pytest.raises(InferenceServerException, match="unexpected shape for input 'INPUT0'") as bad:
        client.infer(PINNED, add_sub_inputs(np.ones((1, 5), np.float32), np.ones((1, 5), np.float32)))
    assert bad.value.status() == "400"
    with pytest.raises(InferenceServerException) as unknown:  # not loaded, and no model id asks for it
        client.infer("double", double_inputs(np.ones(3, np.float32)))
    assert "double" in unknown.value.message()


def test_a_multiplexed_model_id_loads_the_model_and_the_lru_unloads_it(cluster: Cluster) -> None:
    client = cluster.client()
    x = np.arange(5, dtype=np.float32)
    for name in ("double", "double_b", "double", "double_b"):
        result = client.infer(name, double_inputs(x), headers={MODEL_ID: name})
        np.testing.assert_array_equal(result.as_numpy("Y"), 2 * x)
    seconds = np.array([0.01], np.float32)
    result = client.infer("sleep", [_tensor("SECONDS", seconds)], headers={MODEL_ID: "sleep"})
    np.testing.assert_array_equal(result.as_numpy("SECONDS_OUT"), seconds)
    stats = cluster.replicas()
    for replica in stats.values():  # one on-demand model per replica (max_models_per_replica=1)
        assert PINNED in replica["loaded_models"]
        assert len(set(replica["loaded_models"]) & set(ON_DEMAND)) <= 1, stats
    loaded = [m for replica in stats.values() for m in replica["loaded_models"] if m in ON_DEMAND]
    assert "sleep" in loaded and len(loaded) <= 2, stats  # three models loaded in all: one at least was unloaded
    with pytest.raises(InferenceServerException, match="failed to load 'nope'") as bad:
        client.infer("nope", double_inputs(x), headers={MODEL_ID: "nope"})
    assert bad.value.status() == "400"


def _tensor(name: str, array: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def _post(url: str, model: str, body: bytes, model_id: str = "") -> tuple[int, bytes]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"content-type": "application/json", **({MODEL_ID: model_id} if model_id else {})}
        connection.request("POST", f"/v2/models/{model}/infer", body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_routing_stats_report_the_replica_queue(cluster: Cluster) -> None:
    """5 requests of 3 s on a model of 2 instances a replica: wherever Ray sends them, each
    replica's queue is what its instances cannot take (3 waiting when one replica has all 5)."""
    body = json.dumps({"inputs": [{"name": "SECONDS", "datatype": "FP32", "shape": [1], "data": [3.0]}]}).encode()
    warm = json.dumps({"inputs": [{"name": "SECONDS", "datatype": "FP32", "shape": [1], "data": [0.0]}]}).encode()
    assert _post(cluster.url, "sleep", warm, "sleep")[0] == 200
    actors = [ray.get_actor(name, namespace="serve") for name in sorted(cluster.replicas())]
    with ThreadPoolExecutor(5) as pool:
        answers = [pool.submit(_post, cluster.url, "sleep", body, "sleep") for _ in range(5)]
        deadline = time.monotonic() + 30
        while True:
            stats = ray.get([a.record_routing_stats.remote() for a in actors], timeout=10)
            waiting = [max(0, s["ongoing_requests"] - 2) for s in stats]  # 2 instances execute
            if sum(s["ongoing_requests"] for s in stats) == 5 and [s["queue_depth"] for s in stats] == waiting:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        assert sum(waiting) >= 1, stats  # 5 requests, 4 instances in all: one waits at least
        assert [a.result()[0] for a in answers] == [200] * 5
    stats = ray.get([a.record_routing_stats.remote() for a in actors], timeout=10)
    assert [(s["queue_depth"], s["ongoing_requests"]) for s in stats] == [(0, 0), (0, 0)]


@dataclass
class Call:
    started: float
    ended: float
    status: int
    answer: bytes = b""  # a failure's body (or the exception), for the assertion's message


def _traffic(url: str, stop: threading.Event, calls: list[Call]) -> Callable[[], None]:
    body = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
                                  for n in ("INPUT0", "INPUT1")]}).encode()  # fmt: skip

    def run() -> None:  # one keep-alive connection, opened again after a failure
        host, port = url.split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {"content-type": "application/json"}
        while not stop.is_set():
            started = time.monotonic()
            try:
                connection.request("POST", f"/v2/models/{PINNED}/infer", body, headers)
                response = connection.getresponse()
                status, answer = response.status, response.read()
                if status == 200:
                    assert json.loads(answer)["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]
                    answer = b""
            except (OSError, http.client.HTTPException) as exc:
                status, answer = 0, repr(exc).encode()
            if status != 200:
                connection.close()
                connection = http.client.HTTPConnection(host, int(port), timeout=60)
            calls.append(Call(started, time.monotonic(), status, answer[:300]))
        connection.close()

    return run


def test_a_killed_replica_is_replaced_and_only_its_requests_in_flight_fail(cluster: Cluster) -> None:
    before = cluster.replicas()
    victim = sorted(before)[0]
    stop, calls = threading.Event(), []
    threads = [threading.Thread(target=_traffic(cluster.url, stop, calls)) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    actor = ray.get_actor(victim, namespace="serve")
    killed_at = time.monotonic()
    ray.kill(actor, no_restart=True)
    killed = time.monotonic()
    time.sleep(3)
    after = cluster.replicas()  # waits for Ray to start the replacement
    replaced = time.monotonic()
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join(60)
    assert victim not in after and len(after) == 2 and set(after) != set(before)
    failed = [c for c in calls if c.status != 200]
    in_flight = [c for c in calls if c.started <= killed and c.ended >= killed_at]
    relative = [(round(c.started - killed_at, 3), round(c.ended - killed_at, 3), c.status, c.answer) for c in failed]
    assert all(c.started <= killed for c in failed), relative  # none sent after the kill failed
    assert all(c.ended >= killed_at for c in failed), relative  # none failed before it
    # in flight: requests sent before the kill returned and answered after it began (a client may
    # have two in that window); each client thread had one at most when the replica died
    assert len(failed) <= len(in_flight) and len(failed) <= len(threads), (relative, len(in_flight))
    assert sum(c.status == 200 and c.started > replaced for c in calls) > 0
    assert sum(c.status == 200 for c in calls) > 20
    print(f"kill: {len(calls)} requests, {len(failed)} failed (in flight at the kill: {len(in_flight)})")


def test_bad_inferd_flags_stop_the_command_before_ray_starts() -> None:
    command = [sys.executable, "-m", "inferd_serve_ray.cli", "--replicas", "2", "--model-repository", "m", "--bogus"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "inferd-ray-serve: inferd serve: error: unrecognized arguments: --bogus" in done.stderr
    assert "ray" not in done.stdout.lower()
    with pytest.raises(ValueError, match="unknown argument 'replica': inferd_args or one of replicas"):
        serve_ray.build({"inferd_args": "--model-repository m", "replica": "2"})


def test_the_settings_become_ray_s_deployment_options() -> None:
    fixed = serve_ray.RaySettings(replicas=3).deployment_options()
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["max_ongoing_requests"] == 64 and fixed["ray_actor_options"] == {"num_cpus": 1.0}
    scaled = serve_ray.RaySettings(replicas=2, min_replicas=1, max_replicas=8, target_ongoing_requests=6)
    assert scaled.deployment_options()["autoscaling_config"] == {
        "min_replicas": 1, "initial_replicas": 2, "max_replicas": 8, "target_ongoing_requests": 6,
    }  # fmt: skip
    assert "num_replicas" not in scaled.deployment_options()
    app = serve_ray.build({"inferd_args": "--model-repository /m", "min_replicas": "2", "max_replicas": 4})
    assert app is not None  # a bound application: Ray deploys it (the cluster tests run one)
    argv = serve_ray.deployment.inferd_argv(["--model-repository", "/m"])
    assert argv == ["--model-repository", "/m", "--model-control-mode", "explicit", "--load-model", "*"]
    assert serve_ray.deployment.inferd_argv(["--model-control-mode=none"]) == ["--model-control-mode=none"]
