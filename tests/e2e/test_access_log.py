"""``--access-log FILE`` (docs/traffic.md, "Access log") against a real ``inferd serve`` with API
keys: one line per KServe HTTP and gRPC infer request (both gRPC transports), with its tenant,
model, the version that answered, protocol, status (a failure's too), queue and compute
microseconds and bytes in and out; every field parses, and the figures agree with the request's
own ``"timing": true`` parameters. Without the flag no file is written."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.http_calls import http_call
from tests.python_models import source
from tests.servers import Servers
from tests.waiting import wait_for

WORDS_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
AUTH = {"tenants": {"alice": {"keys": [digest("alice-key")]}, "bob": {"keys": [digest("bob-key")]}}}
LINE = re.compile(
    r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) tenant=(?P<tenant>\S+) model=(?P<model>\S+) "
    r"version=(?P<version>\S+) protocol=(?P<protocol>http|grpc) status=(?P<status>\S+) "
    r"queue_us=(?P<queue_us>\d+|-) compute_us=(?P<compute_us>\d+|-) bytes_in=(?P<bytes_in>\d+) "
    r"bytes_out=(?P<bytes_out>\d+)"
)


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers):
    root = tmp_path_factory.mktemp("access_log")
    repo = write_repository(
        root / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}}
    )
    (root / "auth.json").write_text(json.dumps(AUTH))
    logfile = root / "access.log"
    process = serve(
        repo, f"--auth-config={root / 'auth.json'}", f"--access-log={logfile}", f"--grpc-transport={request.param}"
    )
    return process, logfile


def _http(server: ServerProcess, key: str, body: bytes) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    status, raw = http_call(f"http://{server.http_url}/v2/models/words/infer", "POST", body, headers=headers)
    return status, raw


def _grpc(server: ServerProcess, key: str, text: str, timing: bool = False) -> service_pb2.ModelInferResponse:
    request = service_pb2.ModelInferRequest(model_name="words")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", len(text)) + text.encode())
    if timing:
        request.parameters["timing"].bool_param = True
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        metadata = [("authorization", f"Bearer {key}")] if key else []
        return stub.ModelInfer(request, metadata=metadata, timeout=60)


def _lines(logfile: Path, count: int) -> list[dict[str, str]]:
    wait_for(lambda: logfile.exists() and len(logfile.read_text().splitlines()) >= count, timeout=30, what="lines")
    out = []
    for line in logfile.read_text().splitlines():
        found = LINE.fullmatch(line)
        assert found is not None, line
        out.append(found.groupdict())
    return out


def test_one_line_per_request_over_http_and_grpc(server) -> None:
    process, logfile = server
    before = len(logfile.read_text().splitlines()) if logfile.exists() else 0
    started = time.time()
    body = json.dumps(
        {
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a b"]}],
            "parameters": {"timing": True},
        }  # fmt: skip
    ).encode()
    status, raw = _http(process, "alice-key", body)
    assert status == 200
    params = json.loads(raw)["parameters"]
    response = _grpc(process, "bob-key", "x y z", timing=True)
    grpc_params = {k: v.int64_param for k, v in response.parameters.items()}
    bad = b'{"inputs": [{"name": "nope", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}'
    status, _ = _http(process, "alice-key", bad)
    assert status == 400
    with pytest.raises(grpc.RpcError) as failed:
        _grpc(process, "bob-key", "please fail")
    assert failed.value.code() == grpc.StatusCode.INTERNAL  # type: ignore[attr-defined]

    lines = _lines(logfile, before + 4)[before:]
    assert len(lines) == 4, lines
    ok_http, ok_grpc, bad_http, bad_grpc = lines
    assert (ok_http["tenant"], ok_http["model"], ok_http["version"], ok_http["protocol"], ok_http["status"]) == (
        "alice", "words", "1", "http", "200")  # fmt: skip
    assert int(ok_http["bytes_in"]) == len(body) and int(ok_http["bytes_out"]) == len(raw)
    assert int(ok_http["queue_us"]) == params["timing_queue_us"]
    compute = sum(params[k] for k in ("timing_compute_input_us", "timing_compute_infer_us", "timing_compute_output_us"))
    assert abs(int(ok_http["compute_us"]) - compute) <= 2  # each part rounded down on its own
    assert (ok_grpc["tenant"], ok_grpc["protocol"], ok_grpc["status"], ok_grpc["version"]) == ("bob", "grpc", "OK", "1")
    assert int(ok_grpc["queue_us"]) == grpc_params["timing_queue_us"]
    assert int(ok_grpc["bytes_in"]) >= len("x y z") and int(ok_grpc["bytes_out"]) >= len("X Y Z DONE")
    assert (bad_http["tenant"], bad_http["status"], bad_http["protocol"]) == ("alice", "400", "http")
    assert (bad_http["queue_us"], bad_http["compute_us"]) == ("-", "-")  # it never reached an instance
    assert (bad_grpc["tenant"], bad_grpc["status"], bad_grpc["model"]) == ("bob", "INTERNAL", "words")
    for line in lines:
        stamp = time.mktime(time.strptime(line["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert started - 2 <= stamp <= time.time() + 2, line


def test_generate_lines(server) -> None:
    process, logfile = server
    before = len(logfile.read_text().splitlines()) if logfile.exists() else 0
    headers = {"Authorization": "Bearer alice-key", "Content-Type": "application/json"}
    url = f"http://{process.http_url}/v2/models/words/generate"
    body = b'{"text_input": "a b c"}'
    status, raw = http_call(url, "POST", body, headers=headers)
    assert status == 200 and json.loads(raw)["text_output"] == "A B C DONE"
    failing = b'{"text_input": "please fail"}'
    status, failed = http_call(url, "POST", failing, headers=headers)
    assert status == 400
    ok, bad = _lines(logfile, before + 2)[before:]
    assert (ok["tenant"], ok["model"], ok["version"], ok["protocol"], ok["status"]) == (
        "alice",
        "words",
        "1",
        "http",
        "200",
    )
    assert (int(ok["bytes_in"]), int(ok["bytes_out"])) == (len(body), len(raw))
    assert ok["compute_us"] != "-" and int(ok["compute_us"]) > 0
    assert (bad["status"], int(bad["bytes_in"]), int(bad["bytes_out"])) == ("400", len(failing), len(failed))


def test_access_log_to_standard_output(tmp_path: Path, serve: Servers) -> None:
    repo = write_repository(
        tmp_path / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}}
    )
    process = serve(repo, "--access-log=-")
    _grpc(process, "", "a")  # no --auth-config: no tenant

    def logged() -> list[dict[str, str]]:
        return [m.groupdict() for line in process.log().splitlines() if (m := LINE.search(line)) is not None]

    wait_for(lambda: len(logged()) == 1, timeout=30, what="one line on standard output")
    (line,) = logged()
    assert (line["tenant"], line["model"], line["protocol"], line["status"]) == ("-", "words", "grpc", "OK")


def test_an_unwritable_access_log_stops_the_start(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}}
    )
    done = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(repo), "--access-log",
         str(tmp_path / "missing" / "access.log"), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "--access-log: cannot write" in done.stderr, done.stderr


def test_workers_share_the_file_line_by_line(tmp_path: Path) -> None:
    """Two workers append to one file: every request has one whole line, whichever worker ran it."""
    repo = write_repository(
        tmp_path / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}}
    )
    logfile = tmp_path / "access.log"
    with ServerProcess([repo], ["--workers", "2", f"--access-log={logfile}"]) as proc:
        pids, sent = set(), 0
        url = f"http://{proc.http_url}/v2/models/words/generate"
        while len(pids) < 2 or sent < 20:
            assert sent < 100, f"the requests did not reach both workers: {pids}"
            status, raw = http_call(url, "POST", b'{"text_input": "one two"}')  # a new connection each
            assert status == 200
            pids.add(json.loads(raw)["pid"])
            sent += 1
        lines = _lines(logfile, sent)
    assert len(lines) == sent and all(line["status"] == "200" and line["model"] == "words" for line in lines)
