"""A load on demand refused over gRPC (not ready within ``--model-load-on-demand-timeout-secs``)
answers UNAVAILABLE with trailing metadata ``retry-after`` (seconds), as HTTP answers 503 with
``Retry-After``: on both gRPC transports (the default h2 one and ``--grpc-transport grpcio``).

tritonclient's InferenceServerException keeps the status and the message but not the trailers, so
the trailers are read with grpcio and the stubs tritonclient ships; tritonclient is asked too."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source

TIMEOUT_S = 1


def _slow_hog() -> dict[str, str]:
    """``memory_hog`` (1 MiB, answers 5) whose initialize sleeps 4 s: longer than the timeout."""
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", "1").replace("IDENT", "5")
    code = source("memory_hog").replace(
        "    def initialize(self, args):\n", "    def initialize(self, args):\n        time.sleep(4)\n"
    )
    return {"config.pbtxt": config, "1/model.py": code}


def _request(model: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="MS", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(0)
    return request


@pytest.mark.parametrize("transport", ["h2", "grpcio"])
def test_a_refused_load_on_demand_answers_unavailable_with_retry_after(tmp_path: Path, transport: str) -> None:
    repo = write_repository(tmp_path / "models", {"slow": _slow_hog(), "other": _slow_hog()})
    flags = ["--model-load-on-demand=true", f"--model-load-on-demand-timeout-secs={TIMEOUT_S}"]
    with ServerProcess([repo], [*flags, "--grpc-transport", transport]) as srv:
        with grpc.insecure_channel(srv.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(_request("slow"), timeout=30)
            error = refused.value
            assert error.code() is grpc.StatusCode.UNAVAILABLE, error
            assert "'slow'" in error.details() and "--model-load-on-demand-timeout-secs" in error.details()
            trailers = dict(error.trailing_metadata() or ())
            # the server's advice: a quarter of the timeout, at least 1 s
            assert trailers.get("retry-after") == "1", trailers
            # the load went on: once its model is ready the retry is answered, and carries no retry-after
            answer, refusals = None, []
            for _ in range(60):
                try:
                    answer, call = stub.ModelInfer.with_call(_request("slow"), timeout=30)
                    break
                except grpc.RpcError as again:
                    refusals.append((again.code(), dict(again.trailing_metadata() or ()).get("retry-after")))
            assert all(r == (grpc.StatusCode.UNAVAILABLE, "1") for r in refusals), refusals
            assert answer is not None and answer.outputs[0].name == "ID"
            assert np.frombuffer(answer.raw_output_contents[0], dtype=np.int64).tolist() == [5]
            assert "retry-after" not in dict(call.trailing_metadata() or ())
        # tritonclient: the status and the message (it exposes no trailers)
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        x = grpcclient.InferInput("MS", [1], "INT32")
        x.set_data_from_numpy(np.zeros(1, dtype=np.int32))
        with pytest.raises(InferenceServerException) as raised:
            client.infer("other", [x], client_timeout=30)
        assert raised.value.status() == "StatusCode.UNAVAILABLE" and "'other'" in raised.value.message()


def test_an_error_that_is_not_a_refusal_carries_no_retry_after(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"slow": _slow_hog()})
    with ServerProcess([repo], ["--model-load-on-demand=true"]) as srv, grpc.insecure_channel(srv.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(_request("nope"), timeout=30)
        assert refused.value.code() is grpc.StatusCode.NOT_FOUND, refused.value
        assert "retry-after" not in dict(refused.value.trailing_metadata() or ())
