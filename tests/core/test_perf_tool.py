"""``inferd perf`` end to end: the CLI in a subprocess against a live inferd serving Python models.

Exactness check: the tool prints how many requests it completed over the whole run (windows,
ramp-up and drain included); the server's statistics delta over the same run must match it.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from inferd.tools import COMMANDS
from tests.python_models import source
from tests.servers import Servers

ADD_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ADD_PY = source("add_two")
# Decoupled: COUNT responses, then the final flag on its own.
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
REPEAT_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "COUNT").as_numpy()[0])
            sender = r.get_response_sender()
            for i in range(n):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
# Sequence model (control tensors, so Triton runs it too): refuses a request of a sequence it
# never saw start, or a second start of an open one; OPEN counts sequences started, not ended.
SEQ_CONFIG = """
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OPEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
SEQ_PY = source("perf_tool_seq")

TOTALS = re.compile(r"inferd perf: (\d+) requests completed \((\d+) responses\), (\d+) failed")
CSV_HEAD = ["Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
            "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
            "p50 latency", "p90 latency", "p95 latency", "p99 latency"]  # fmt: skip
FAST = ["-p", "200", "-r", "3"]


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    models = {
        "add": {"config.pbtxt": ADD_CONFIG, "1/model.py": ADD_PY},
        "repeat": {"config.pbtxt": REPEAT_CONFIG, "1/model.py": REPEAT_PY},
        "seq": {"config.pbtxt": SEQ_CONFIG, "1/model.py": SEQ_PY},
    }
    models = {m: {k: textwrap.dedent(v) for k, v in files.items()} for m, files in models.items()}
    return serve(models)


def perf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferd.host.cli", "perf", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def counts(server: ServerProcess, model: str) -> tuple[int, int]:
    """(successful requests, inferences) from the server's statistics."""
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics(model)["model_stats"]
    return (sum(s["inference_stats"]["success"]["count"] for s in stats), sum(s["inference_count"] for s in stats))


def totals(out: str) -> tuple[int, int, int]:
    match = TOTALS.search(out)
    assert match, out
    return int(match[1]), int(match[2]), int(match[3])


@pytest.mark.parametrize(("protocol", "batch"), [("http", 1), ("grpc", 2)])
def test_concurrency_range_counts_and_csv(server: ServerProcess, tmp_path: Path, protocol: str, batch: int) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    report = tmp_path / "perf.csv"
    before = counts(server, "add")
    run = perf("-m", "add", "-u", url, "-i", protocol, "-b", str(batch), "--concurrency-range", "1:2", *FAST,
               "-f", str(report))  # fmt: skip
    after = counts(server, "add")
    assert run.returncode == 0, run.stderr + run.stdout
    completed, responses, failed = totals(run.stdout)
    assert failed == 0 and completed > 0 and responses == completed
    assert after[0] - before[0] == completed  # every request the tool completed, and no other
    assert after[1] - before[1] == completed * batch
    assert "Concurrency: 1, throughput:" in run.stdout and "Concurrency: 2, throughput:" in run.stdout
    assert re.search(r"Client CPU: \d+ usec/request", run.stdout)
    with open(report) as f:
        rows = list(csv.reader(f))
    assert rows[0] == CSV_HEAD
    body = [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    assert sorted(r["Concurrency"] for r in body) == ["1", "2"]
    tput = [float(r["Inferences/Second"]) for r in body]
    assert tput == sorted(tput) and tput[0] > 0  # perf_analyzer sorts rows by throughput
    for r in body:
        assert int(r["p50 latency"]) <= int(r["p99 latency"])
        assert int(r["Server Compute Infer"]) > 0


def test_request_rate_and_verbose_csv(server: ServerProcess, tmp_path: Path) -> None:
    report = tmp_path / "rate.csv"
    before = counts(server, "add")
    run = perf("-m", "add", "-u", server.http_url, "--request-rate-range", "100", *FAST, "-f", str(report),
               "--verbose-csv", "--request-distribution", "poisson")  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert counts(server, "add")[0] - before[0] == totals(run.stdout)[0]
    assert "Request Rate: 100," in run.stdout
    with report.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][0] == "Request Rate" and rows[0][-3:] == ["Avg latency", "request/response", "response wait"]
    assert len(rows) == 2


def test_streaming_decoupled_counts_responses(server: ServerProcess, tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"COUNT": [3]}]}))
    report = tmp_path / "stream.csv"
    run = perf("-m", "repeat", "-u", server.grpc_url, "-i", "grpc", "--streaming", "--input-data", str(data),
               "--concurrency-range", "2", *FAST, "-f", str(report))  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    completed, responses, _ = totals(run.stdout)
    assert completed > 0 and responses == 3 * completed
    assert "Response Throughput:" in run.stdout
    with report.open(newline="") as f:
        head, row = list(csv.reader(f))
    assert head[2] == "Response Throughput"
    values = dict(zip(head, row, strict=True))
    assert float(values["Response Throughput"]) == pytest.approx(3 * float(values["Inferences/Second"]), rel=0.01)


def test_decoupled_without_streaming_is_refused(server: ServerProcess) -> None:
    run = perf("-m", "repeat", "-u", server.grpc_url, "-i", "grpc", *FAST)
    assert run.returncode != 0 and "--streaming" in run.stderr


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequences_start_and_end(server: ServerProcess, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    before = counts(server, "seq")
    run = perf("-m", "seq", "-u", url, "-i", protocol, "--sequence-length", "3", "--concurrency-range", "2", *FAST)
    assert run.returncode == 0, run.stderr + run.stdout
    assert counts(server, "seq")[0] - before[0] == totals(run.stdout)[0]
    client = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("IN", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[1]], np.int32))
    result = client.infer("seq", [inp], sequence_id=10**9, sequence_start=True, sequence_end=True)
    assert result.as_numpy("OPEN").item() == 0  # every sequence the tool started, it ended


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unknown_model_is_a_clear_error(server: ServerProcess, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    run = perf("-m", "nope", "-u", url, "-i", protocol, *FAST)
    assert run.returncode == 1
    assert run.stderr.startswith("error:") and "'nope'" in run.stderr and "Traceback" not in run.stderr


def test_batch_over_max_batch_size_is_refused(server: ServerProcess) -> None:
    run = perf("-m", "add", "-u", server.http_url, "-b", "9", *FAST)
    assert run.returncode == 1 and "max_batch_size 8" in run.stderr


def test_missing_client_library_names_the_extra() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('tritonclient', 'aiohttp'):\n"
        "            raise ImportError('blocked for the test: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from inferd.host.cli import main\n"
        "sys.exit(main(['perf', '-m', 'add', '-u', '127.0.0.1:1']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert "pip install 'inferd[tools]'" in run.stderr


def test_json_tensor_formats(server: ServerProcess) -> None:
    before = counts(server, "add")
    run = perf("-m", "add", "-u", server.http_url, "--input-tensor-format", "json", "--output-tensor-format", "json",
               "--input-data", "zero", *FAST)  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert counts(server, "add")[0] - before[0] == totals(run.stdout)[0]


#: What a tool command never loads: the server and its stack.
SERVER = ("inferd.host.serve_command", "inferd.host.server", "httptools", "grpc")
#: What the tools load only when they run: their client libraries.
CLIENTS = ("tritonclient", "aiohttp", "matplotlib")


def test_cli_import_stays_light() -> None:
    code = f"import inferd.host.cli, sys; print([m for m in {CLIENTS + SERVER!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "[]", run.stderr


@pytest.mark.parametrize("tool", ["perf", "analyze", "health"])
def test_a_tool_command_loads_its_module_not_the_server(tool: str) -> None:
    # every `inferd` process runs inferd.host.cli first; `inferd serve`'s command line is loaded for serve only
    code = (
        "import sys\nfrom inferd.host.cli import main\n"
        f"try:\n    main([{tool!r}, '--help'])\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        f"print([m for m in {SERVER!r} if m in sys.modules], {COMMANDS[tool]!r} in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"usage: inferd {tool}" in run.stdout
    assert run.stdout.strip().splitlines()[-1] == "[] True", run.stdout[-500:]


# ---- units: ranges, shapes, request data, stability, HTTP framing


def test_parse_range_and_shape() -> None:
    from inferd.tools import ToolError
    from inferd.tools.perf.options import parse_range, parse_shape

    assert parse_range("1:8:2", "--concurrency-range") == [1, 3, 5, 7]
    assert parse_range("4", "--concurrency-range") == [4]
    assert parse_range("10:30:10", "--request-rate-range", float) == [10.0, 20.0, 30.0]
    assert parse_shape("IMAGE:3,224,224") == ("IMAGE", [3, 224, 224])
    for bad in ("0:4", "4:1", "1:0", "a:b", "1:2:3:4"):
        with pytest.raises(ToolError):
            parse_range(bad, "--concurrency-range")
    with pytest.raises(ToolError):
        parse_shape("IMAGE:3,x")


def test_input_data_shapes_and_json(tmp_path: Path) -> None:
    from inferd.config import parse_config_text
    from inferd.tools import ToolError
    from inferd.tools.perf.inputs import build_data
    from inferd.tools.perf.model import ModelInfo, TensorSpec
    from inferd.tools.perf.options import PerfOptions

    config = parse_config_text("max_batch_size: 4", "test")
    info = ModelInfo("m", "", (TensorSpec("X", "FP32", (-1, -1, 3)), TensorSpec("S", "BYTES", (-1, 2))), (), config)
    with pytest.raises(ToolError, match="--shape X:1,3"):
        build_data(info, PerfOptions(model="m"))
    entry = build_data(info, PerfOptions(model="m", batch_size=2, shapes={"X": [5, 3]}, string_length=7))[0][0]
    assert entry["X"].shape == (2, 5, 3) and entry["X"].dtype == np.float32
    assert entry["S"].shape == (2, 2) and all(len(v) == 7 for v in entry["S"].reshape(-1))
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"data": [{"X": {"content": [1, 2, 3, 4, 5, 6], "shape": [2, 3]}, "S": ["a", "bc"]}]}))
    entry = build_data(info, PerfOptions(model="m", input_data=str(data)))[0][0]
    assert entry["X"].tolist() == [[[1, 2, 3], [4, 5, 6]]] and entry["S"].tolist() == [[b"a", b"bc"]]


def test_stability_rule() -> None:
    from inferd.tools.perf.options import PerfOptions
    from inferd.tools.perf.profiler import Window, stable
    from inferd.tools.perf.server_stats import ServerStats

    def window(n: int, latency_us: int) -> Window:
        return Window([(0, latency_us * 1000, latency_us * 1000, 0, 0, 1)] * n, 10**9, ServerStats(), 0.0)

    opts = PerfOptions(model="m", stability_percentage=10)
    assert not stable([window(100, 50), window(100, 50)], opts)  # needs three windows
    assert stable([window(10, 50), window(100, 50), window(104, 52), window(96, 49)], opts)
    assert not stable([window(100, 50), window(120, 50), window(100, 50)], opts)  # throughput spread 20%
    assert not stable([window(100, 50), window(100, 70), window(100, 50)], opts)  # latency spread


def test_http11_content_length_chunked_and_close() -> None:
    from inferd.tools.perf.http11 import Connection, Response

    got: list[Response | None] = []
    released: list[Connection] = []
    conn = Connection(released.append)

    class Sink:
        def write(self, data: bytes) -> None:
            pass

        def close(self) -> None:
            pass

    conn.connection_made(Sink())  # type: ignore[arg-type]
    conn.request(b"", lambda r, e, retry: got.append(r))
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhel")
    assert not got
    conn.data_received(b"lo")
    assert got[-1] is not None and got[-1].body == b"hello" and released == [conn] and conn.usable
    conn.request(b"", lambda r, e, retry: got.append(r))
    for piece in (b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r", b"\n2\r\nde\r\n0\r\n\r\n"):
        conn.data_received(piece)
    assert got[-1] is not None and got[-1].status == 400 and got[-1].body == b"abcde"
    conn.request(b"", lambda r, e, retry: got.append(r))
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    assert got[-1] is not None and got[-1].body == b"" and not conn.usable
