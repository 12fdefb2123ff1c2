"""Every HTTP and gRPC response of the example repository, byte for byte, against a recording.

A real ``inferd serve`` on a copy of ``examples/models`` (model control mode "none", as ``make
serve``) answers the fixed requests of ``golden_http.py`` and ``golden_grpc.py``, one at a time, in
a fixed order; a second one in "explicit" mode answers the load/unload requests again. On a stream,
each request is sent once the previous one is answered (see ``_lockstep``). For HTTP the status,
the headers (minus ``date`` and ``server``) and the body bytes are kept; for gRPC the status code,
the details and ``SerializeToString(deterministic=True)`` of each response. The recording lives in
``tests/fixtures/golden/example_repository.json`` (bodies base64).

``INFERD_RECORD_GOLDEN=1 pytest tests/e2e/test_golden_responses.py`` writes it; without the
variable the test compares and, on a mismatch, shows the first differing request.

Normalised, and only these (each is measured time or a wall-clock stamp, not behaviour):
statistics' ``ns`` values and ``last_inference`` stamps (counts are kept), the values of the
timing, memory and utilization samples of ``/metrics`` (names, labels, HELP/TYPE lines and the
count samples are kept), and the ``content-length`` of exactly those masked bodies (recomputed, and
only when the server's own value matched its body). HTTP headers are compared sorted by name:
their order carries no meaning in HTTP and the two HTTP pipelines emit them in different orders.
"""

from __future__ import annotations

import base64
import difflib
import http.client
import json
import os
import queue
import re
import shutil
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from google.protobuf.message import Message

from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc import grpc_service_pb2_grpc as pb_grpc
from inferd.frontends.grpc import health_pb2, health_pb2_grpc
from inferd.testing import ServerProcess
from tests.conftest import EXAMPLES, ROOT
from tests.e2e import golden_grpc, golden_http
from tests.e2e.example_builder import build_models
from tests.e2e.golden_grpc import STREAMING, GrpcCall
from tests.e2e.golden_http import HttpCall

GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "example_repository.json"
RECORD = os.environ.get("INFERD_RECORD_GOLDEN") == "1"
VOLATILE_HEADERS = {"date", "server"}

Recording = dict[str, list[dict[str, Any]]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- masking of measured values -------------------------------------------------------------------

_STATS_TIMES = re.compile(rb'"(ns|last_inference)":\d+')
_SAMPLE = re.compile(rb"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
_COUNT_SAMPLE = re.compile(rb"(_success|_failure|_count)$")


def mask_stats_json(body: bytes) -> bytes:
    return _STATS_TIMES.sub(lambda m: b'"' + m.group(1) + b'":0', body)


def mask_metrics_text(body: bytes) -> bytes:
    """Sample values become ``<v>`` except counts (``*_success``, ``*_failure``, ``*_count``)."""
    lines = []
    for line in body.split(b"\n"):
        m = _SAMPLE.match(line)
        if m and not (_COUNT_SAMPLE.search(m.group(1)) and b"duration" not in m.group(1)):
            line = line[: m.start(3)] + b"<v>"
        lines.append(line)
    return b"\n".join(lines)


def mask_stats_message(message: Message) -> None:
    """Zero every ``ns`` and ``last_inference`` field of a statistics message, recursively."""
    for field, value in message.ListFields():
        if field.name in ("ns", "last_inference"):
            message.ClearField(field.name)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            for item in value.values():
                if isinstance(item, Message):
                    mask_stats_message(item)
        elif field.message_type is not None:
            for item in [value] if isinstance(value, Message) else value:
                mask_stats_message(item)


# -- sending --------------------------------------------------------------------------------------


def send_http(call: HttpCall, server: ServerProcess) -> dict[str, Any]:
    port = server.metrics_port if call.port == "metrics" else server.http_port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        body = call.body if call.body or call.method != "GET" else None
        conn.request(call.method, call.path, body=body, headers=call.headers)
        resp = conn.getresponse()
        status, headers, data = resp.status, resp.getheaders(), resp.read()
    finally:
        conn.close()
    kept = sorted((k.lower(), v) for k, v in headers if k.lower() not in VOLATILE_HEADERS)
    masked = mask_metrics_text(data) if call.port == "metrics" else data
    masked = mask_stats_json(masked) if call.path.endswith("/stats") else masked
    if masked != data:
        kept = [(k, str(len(masked)) if k == "content-length" and v == str(len(data)) else v) for k, v in kept]
    return {"name": call.name, "request": f"{call.method} {call.path}", "status": status,
            "headers": [list(h) for h in kept], "body": _b64(masked)}  # fmt: skip


def response_class(method: str) -> type[Message]:
    if method == "Check":
        return health_pb2.HealthCheckResponse
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    return getattr(pb, service.methods_by_name[method].output_type.name)  # type: ignore[no-any-return]


def _lockstep(rpc: Any, requests: tuple[Message, ...]) -> list[Message]:
    """One stream; each request is sent once the previous one is answered. Requests in flight
    together on a stream are answered in whatever order they finish, so sending them at once
    would make the order of the responses (and so the recording) vary from run to run."""
    answered: queue.Queue[None] = queue.Queue()

    def outgoing() -> Iterator[Message]:
        for i, request in enumerate(requests):
            if i:
                answered.get(timeout=60)
            yield request

    responses = []
    for response in rpc(outgoing(), timeout=60):
        responses.append(response)
        answered.put(None)
    return responses


def send_grpc(call: GrpcCall, channel: grpc.Channel) -> dict[str, Any]:
    if call.method == "Check":
        rpc = health_pb2_grpc.HealthStub(channel).Check
    else:
        rpc = getattr(pb_grpc.GRPCInferenceServiceStub(channel), call.method)
    responses: list[Message] = []
    code, details = "OK", ""
    try:
        responses = _lockstep(rpc, call.requests) if call.method in STREAMING else [rpc(call.requests[0], timeout=60)]
    except grpc.RpcError as exc:
        code, details = exc.code().name, exc.details() or ""
    for response in responses:
        if call.method == "ModelStatistics":
            mask_stats_message(response)
    return {"name": call.name, "method": call.method, "code": code, "details": details,
            "responses": [_b64(r.SerializeToString(deterministic=True)) for r in responses]}  # fmt: skip


# -- the recording --------------------------------------------------------------------------------


def run_all(server: ServerProcess) -> Recording:
    """Every call, in the one fixed order; statistics come after all inference, load/unload last."""
    out: Recording = {"http": [], "grpc": [], "metrics": [], "lifecycle": [], "explicit": []}
    channel = grpc.insecure_channel(server.grpc_url)
    try:
        for phase in ("metadata_calls", "infer_calls", "infer_error_calls", "extension_calls", "stats_calls"):
            out["http"] += [send_http(c, server) for c in getattr(golden_http, phase)()]
            out["grpc"] += [send_grpc(c, channel) for c in getattr(golden_grpc, phase)()]
        out["metrics"] = [send_http(c, server) for c in golden_http.metrics_calls()]
        out["lifecycle"] = run_lifecycle(server, channel)
    finally:
        channel.close()
    return out


def run_lifecycle(server: ServerProcess, channel: grpc.Channel) -> list[dict[str, Any]]:
    return [send_http(c, server) for c in golden_http.lifecycle_calls()] + [
        send_grpc(c, channel) for c in golden_grpc.lifecycle_calls()
    ]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    repo = tmp_path_factory.mktemp("golden") / "models"
    shutil.copytree(EXAMPLES, repo, ignore=shutil.ignore_patterns("__pycache__"))
    if not (repo / "mlp_onnx" / "1" / "model.onnx").exists():  # examples/build_models.py not run yet
        build_models().build_mlp(repo / "mlp_onnx" / "1" / "model.onnx")
    with ServerProcess([repo]) as server:  # model control mode "none", as `make serve`
        actual = run_all(server)
    explicit = ["--model-control-mode", "explicit", "--load-model", "*"]
    with ServerProcess([repo], explicit) as server, grpc.insecure_channel(server.grpc_url) as channel:
        actual["explicit"] = run_lifecycle(server, channel)
    if RECORD:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(actual, indent=1) + "\n")
    return actual


# -- comparing ------------------------------------------------------------------------------------


def _show(entry: dict[str, Any]) -> str:
    """A readable form of one recorded response."""
    if "status" in entry:
        body = base64.b64decode(entry["body"]).decode("utf-8", errors="backslashreplace")
        return f"status {entry['status']}\nheaders {entry['headers']}\nbody:\n" + body
    cls = response_class(entry["method"])
    texts = [text_format.MessageToString(cls.FromString(base64.b64decode(r))) for r in entry["responses"]]
    return f"code {entry['code']}\ndetails {entry['details']!r}\nresponses:\n" + "\n---\n".join(texts)


def first_difference(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> str | None:
    """None when equal; else the first differing request: its name, expected vs actual."""
    for want, got in zip(expected, actual, strict=False):
        if want != got:
            diff = difflib.unified_diff(_show(want).splitlines(), _show(got).splitlines(), "expected", "actual",
                                        lineterm="")  # fmt: skip
            fields = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
            return (f"response to {got.get('name')!r} ({got.get('request') or got.get('method')}) differs in "
                    f"{fields}:\n--- expected\n{_show(want)}\n--- actual\n{_show(got)}\n--- diff\n"
                    + "\n".join(diff))  # fmt: skip
    if len(expected) != len(actual):
        names = [e["name"] for e in actual]
        return f"{len(expected)} responses recorded, {len(actual)} now ({names}); re-record with INFERD_RECORD_GOLDEN=1"
    return None


@pytest.fixture(scope="module")
def golden(recording: Recording) -> Recording:
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing: record it with INFERD_RECORD_GOLDEN=1")
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("section", ["http", "grpc", "metrics", "lifecycle", "explicit"])
def test_responses_match_the_recording(section: str, recording: Recording, golden: Recording) -> None:
    problem = first_difference(golden[section], recording[section])
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def test_the_masks_keep_counts_and_hide_times() -> None:
    stats = b'{"success":{"count":3,"ns":123456},"last_inference":1700000000123}'
    assert mask_stats_json(stats) == b'{"success":{"count":3,"ns":0},"last_inference":0}'
    metrics = b'# HELP x_us t\nnv_inference_count{model="m"} 7\nnv_inference_request_duration_us{model="m"} 912\n'
    assert mask_metrics_text(metrics) == (
        b'# HELP x_us t\nnv_inference_count{model="m"} 7\nnv_inference_request_duration_us{model="m"} <v>\n'
    )
    message = pb.ModelStatisticsResponse(model_stats=[pb.ModelStatistics(
        name="m", last_inference=5, inference_count=2,
        inference_stats=pb.InferStatistics(success=pb.StatisticDuration(count=2, ns=99)),
        batch_stats=[pb.InferBatchStatistics(batch_size=1, compute_infer=pb.StatisticDuration(count=1, ns=7))],
        response_stats={"k": pb.InferResponseStatistics(success=pb.StatisticDuration(count=1, ns=3))},
    )])  # fmt: skip
    mask_stats_message(message)
    stats_out = message.model_stats[0]
    assert (stats_out.last_inference, stats_out.inference_count) == (0, 2)
    assert (stats_out.inference_stats.success.count, stats_out.inference_stats.success.ns) == (2, 0)
    assert (stats_out.batch_stats[0].compute_infer.count, stats_out.batch_stats[0].compute_infer.ns) == (1, 0)
    assert (stats_out.response_stats["k"].success.count, stats_out.response_stats["k"].success.ns) == (1, 0)
