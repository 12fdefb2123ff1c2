"""``--drain-delay-secs``: from SIGTERM on, readiness is false over HTTP and gRPC (ServerReady and
the gRPC health check) while both protocols still serve inferences; then the server closes and
exits 0. A bad value is refused at start with the flag named."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.frontends.grpc import health_pb2, health_pb2_grpc
from inferd.testing import ServerProcess
from tests.deploy.conftest import ADD_SUB_BODY, ADD_SUB_SUM, copy_add_sub, http_get, http_post

DRAIN_DELAY_S = 3.0


def _grpc_add_sub(client: grpcclient.InferenceServerClient) -> list[float]:
    a = np.array([[1, 2, 3, 4]], np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"), grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a * 10)
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist()[0]


def test_readiness_is_false_while_both_protocols_still_serve(tmp_path):
    repo = copy_add_sub(tmp_path / "models")
    server = ServerProcess([repo], [f"--drain-delay-secs={DRAIN_DELAY_S}"], log_path=tmp_path / "inferd.log")
    with server:
        grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
        http_client = httpclient.InferenceServerClient(server.http_url)
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(server.grpc_url))
        assert grpc_client.is_server_ready() and http_client.is_server_ready()
        assert server.proc is not None
        sigterm_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        while http_get(f"http://{server.http_url}/v2/health/ready")[0] == 200:  # false well inside the drain
            assert time.monotonic() - sigterm_at < DRAIN_DELAY_S, "readiness still true once the drain ended"
            time.sleep(0.01)
        assert http_get(f"http://{server.http_url}/v2/health/ready")[0] == 400  # Triton's not-ready answer
        assert http_get(f"http://{server.http_url}/v2/health/live")[0] == 200
        assert grpc_client.is_server_ready() is False
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        status, body = http_post(f"http://{server.http_url}/v2/models/add_sub/infer", ADD_SUB_BODY)
        assert status == 200 and json.loads(body)["outputs"][0]["data"] == ADD_SUB_SUM
        assert _grpc_add_sub(grpc_client) == ADD_SUB_SUM  # served: the listeners are open until the drain ends
        assert server.proc.wait(DRAIN_DELAY_S + 30) == 0
        assert time.monotonic() - sigterm_at >= DRAIN_DELAY_S
        grpc_client.close()


def test_a_negative_drain_delay_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(tmp_path), "--drain-delay-secs=-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "argument --drain-delay-secs: expected seconds >= 0, got '-1'" in done.stderr
