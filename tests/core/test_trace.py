"""The trace extension: settings over HTTP and gRPC as Triton 2.51 answers them, and trace files.

Settings are strings (``trace_level`` a list of strings); a null value resets one setting (a
model's to the global value, the global one to its start-up value); ``trace_file`` cannot be set
over the network. Trace files are JSON arrays in Triton's layout, one object per timestamp.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.contracts.errors import InvalidArgument, Unsupported
from inferd.contracts.types import InferRequest
from inferd.engine.trace import Tracer, parse_setting
from inferd.testing import ServerProcess, write_repository
from tests.python_models import python_model
from tests.servers import Servers

ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
         "COMPUTE_END", "REQUEST_END"]  # fmt: skip


def repo(root: Path) -> Path:
    model = python_model("identity_x_y")
    return write_repository(root, {"ident": model, "other": model})


def infer(client: httpclient.InferenceServerClient, request_id: str, model: str = "ident") -> None:
    x = httpclient.InferInput("X", [3], "INT32")
    x.set_data_from_numpy(np.arange(3, dtype=np.int32))
    client.infer(model, [x], request_id=request_id)


def traces_in(objects: list[dict]) -> dict[int, dict]:
    """{trace id: {"head": model object, "ts": [(name, ns)...]}} from a trace file's array."""
    out: dict[int, dict] = {}
    for obj in objects:
        t = out.setdefault(obj["id"], {"head": None, "ts": []})
        if "model_name" in obj:
            t["head"] = obj
        for stamp in obj.get("timestamps", []):
            t["ts"].append((stamp["name"], stamp["ns"]))
    return out


def assert_ordered(trace: dict) -> None:
    names = [n for n, _ in trace["ts"]]
    stamps = dict(trace["ts"])
    assert [n for n in names if n in ORDER] == ORDER
    assert [stamps[n] for n in ORDER] == sorted(stamps[n] for n in ORDER)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("trace")
    srv = serve(
        repo(root / "models"),
        "--trace-config",
        f"triton,file={root / 'trace.json'}",
        "--trace-config",
        "triton,log-frequency=2",
    )
    srv.trace_file = root / "trace.json"
    return srv


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def test_extensions_listed(client):
    assert {"trace", "logging"} <= set(client.get_server_metadata()["extensions"])


def test_settings_over_http_follow_triton(server, client):
    path = str(server.trace_file)
    assert client.get_trace_settings() == {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                                           "log_frequency": "2", "trace_file": path, "trace_mode": "triton"}  # fmt: skip
    assert client.update_trace_settings(settings={"trace_rate": "5"})["trace_rate"] == "5"
    model = client.update_trace_settings(model_name="other", settings={"trace_count": "9"})
    assert (model["trace_count"], model["trace_rate"]) == ("9", "5")
    client.update_trace_settings(settings={"trace_rate": "7"})  # the model follows what it does not override
    assert client.get_trace_settings(model_name="other")["trace_rate"] == "7"
    assert client.update_trace_settings(model_name="other", settings={"trace_count": None})["trace_count"] == "-1"
    assert client.update_trace_settings(settings={"trace_rate": None})["trace_rate"] == "1000"  # start-up value
    with pytest.raises(InferenceServerException, match="Unable to parse 'trace_rate', got: x"):
        client.update_trace_settings(settings={"trace_rate": "x"})
    with pytest.raises(InferenceServerException, match="trace file location can not be updated"):
        client.update_trace_settings(settings={"trace_file": "/tmp/elsewhere.json"})
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_trace_settings(model_name="nope")


def test_settings_over_grpc(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        got = g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]}, as_json=True)["settings"]
        assert got["trace_level"]["value"] == ["TIMESTAMPS", "TENSORS"]
        model = g.update_trace_settings(model_name="other", settings={"trace_rate": "3"}, as_json=True)["settings"]
        assert model["trace_rate"]["value"] == ["3"]
        cleared = g.update_trace_settings(model_name="other", settings={"trace_rate": None}, as_json=True)["settings"]
        assert cleared["trace_rate"]["value"] == ["1000"]
        assert g.get_trace_settings(as_json=True)["settings"]["log_frequency"]["value"] == ["2"]
        with pytest.raises(InferenceServerException, match="Unable to parse 'trace_count'"):
            g.update_trace_settings(settings={"trace_count": "many"})
    finally:
        g.update_trace_settings(settings={"trace_level": ["OFF"]})
        g.close()


def test_rate_one_writes_ordered_timestamps_every_log_frequency(server, client):
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    try:
        for i in range(4):
            infer(client, f"r{i}")
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]})
    files = [Path(f"{server.trace_file}.{k}") for k in (0, 1)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(f.exists() and f.stat().st_size for f in files):
        time.sleep(0.05)
    traces = {}
    for f in files:
        traces.update(traces_in(json.loads(f.read_text())))
    assert sorted(t["head"]["request_id"] for t in traces.values()) == ["r0", "r1", "r2", "r3"]
    for t in traces.values():
        assert (t["head"]["model_name"], t["head"]["model_version"]) == ("ident", 1)
        assert_ordered(t)


def test_file_written_at_shutdown_with_count_and_tensors(tmp_path):
    path = tmp_path / "trace.json"
    srv = ServerProcess([repo(tmp_path / "models")], [
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS", "--trace-config", "rate=1",
        "--trace-config", "count=2", "--trace-config", f"triton,file={path}",
    ]).start()  # fmt: skip
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        for i in range(3):
            infer(client, f"s{i}")
        assert client.get_trace_settings()["trace_count"] == "0"
        client.close()
    finally:
        assert srv.stop() == 0
    objects = json.loads(path.read_text())
    traces = traces_in(objects)
    assert sorted(t["head"]["request_id"] for t in traces.values()) == ["s0", "s1"]  # count=2
    for t in traces.values():
        assert_ordered(t)
    tensors = [o for o in objects if "activity" in o]
    assert {o["activity"] for o in tensors} == {"TENSOR_QUEUE_INPUT", "TENSOR_BACKEND_OUTPUT"}
    assert tensors[0]["tensor"] == {"name": "X", "data": "0,1,2", "shape": "3", "dtype": "INT32"}


# -- units ---------------------------------------------------------------------------------------------


def test_sampling_takes_every_rate_th_request_until_count_runs_out():
    tracer = Tracer()
    tracer.configure(["level=TIMESTAMPS", "rate=3", "count=2", "triton,file=/dev/null"])
    taken = [tracer.sample(InferRequest("m", id=str(i)), "m", 1) is not None for i in range(12)]
    assert taken == [False, False, True, False, False, True] + [False] * 6
    assert not tracer.active  # count reached 0: the request path is back to one attribute check


def test_tracing_off_means_inactive():
    tracer = Tracer()
    assert not tracer.active
    tracer.configure(["level=TIMESTAMPS"])  # no file: nothing to write to
    assert not tracer.active


def test_parse_setting_messages():
    assert parse_setting("trace_level", ["timestamps", "OFF"]) == ("TIMESTAMPS",)
    assert parse_setting("trace_count", "-1") == -1
    with pytest.raises(InvalidArgument, match="unknown level 'LOUD'"):
        parse_setting("trace_level", ["LOUD"])
    with pytest.raises(Unsupported):
        parse_setting("trace_file", "/x")
    with pytest.raises(InvalidArgument, match="unknown trace setting 'trace_colour'"):
        parse_setting("trace_colour", "red")


def test_requests_made_by_a_traced_request_are_traced_with_its_id(tmp_path):
    from inferd.contracts.trace import TRACE_PARENT_KEY

    tracer = Tracer()
    tracer.configure(["level=TIMESTAMPS", "rate=1", "count=1", f"triton,file={tmp_path / 't.json'}"])
    parent = tracer.sample(InferRequest("ens", id="p"), "ens", 1)
    assert parent is not None
    child_request = InferRequest("step", id="c")
    child_request.context[TRACE_PARENT_KEY] = parent
    child = tracer.sample(child_request, "step", 1)  # count ran out, yet the child is traced
    assert child is not None and child.to_json()[0] == {"id": 2, "model_name": "step", "model_version": 1,
                                                        "request_id": "c", "parent_id": 1}  # fmt: skip
    for t in (child, parent):
        t.mark("REQUEST_START")
        tracer.finish(t)
    tracer.close()
    heads = [o for o in json.loads((tmp_path / "t.json").read_text()) if "model_name" in o]
    assert [(h["id"], h.get("parent_id")) for h in heads] == [(2, 1), (1, None)]
