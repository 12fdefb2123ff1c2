"""OpenTelemetry trace export: spans from inferd traces, and a real server posting OTLP/HTTP."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.lazy import lazy_import
from tests.python_models import python_model

trace_service = lazy_import("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
in_memory = lazy_import("opentelemetry.sdk.trace.export.in_memory_span_exporter")
otel_exporter = lazy_import("inferd_trace_otel.exporter")


def test_hooks_import_no_opentelemetry():
    code = "import inferd_trace_otel.hooks, sys; assert not any(m.startswith('opentelemetry') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def _trace(trace_id: int = 1) -> list[dict]:
    names = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
             "COMPUTE_END", "REQUEST_END"]  # fmt: skip
    head = {"id": trace_id, "model_name": "m", "model_version": 1, "request_id": "r1"}
    return [head, *({"id": trace_id, "timestamps": [{"name": n, "ns": 1000 * (i + 1)}]} for i, n in enumerate(names))]


def test_a_trace_becomes_a_model_span_with_a_compute_child():
    memory = in_memory.InMemorySpanExporter()
    exporter = otel_exporter.OtelExporter([("resource", "service.name=test"), ("bsp_schedule_delay", "10")], memory)
    exporter([_trace()])
    exporter.shutdown()
    spans = {s.name: s for s in memory.get_finished_spans()}
    model, compute = spans["m"], spans["compute"]
    assert compute.parent.span_id == model.context.span_id
    assert dict(model.attributes) == {"model_name": "m", "model_version": 1, "request_id": "r1", "parent_id": 0}
    assert [e.name for e in model.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert model.end_time - model.start_time == 6000 and compute.end_time - compute.start_time == 3000
    assert model.resource.attributes["service.name"] == "test"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown setting 'colour'"):
        otel_exporter.OtelExporter([("colour", "red")], in_memory.InMemorySpanExporter())
    with pytest.raises(ValueError, match="expected an integer"):
        otel_exporter.OtelExporter([("bsp_schedule_delay", "soon")], in_memory.InMemorySpanExporter())


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_server_exports_spans_over_otlp_http(tmp_path):
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    url = f"127.0.0.1:{collector.server_address[1]}/v1/traces"
    repo = write_repository(tmp_path / "models", {"ident": python_model("identity_x_y")})
    srv = ServerProcess([repo], [
        "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url={url}", "--trace-config", "opentelemetry,bsp_schedule_delay=50",
    ]).start()  # fmt: skip
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        x = httpclient.InferInput("X", [2], "INT32")
        x.set_data_from_numpy(np.arange(2, dtype=np.int32))
        client.infer("ident", [x], request_id="otel-1")
        assert client.get_trace_settings()["trace_mode"] == "opentelemetry"
        client.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not _Collector.received:
            time.sleep(0.05)
    finally:
        srv.stop()
        collector.shutdown()
    spans = []
    for body in _Collector.received:
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    by_name = {s.name: s for s in spans}
    assert {"ident", "compute"} <= set(by_name)
    attrs = {a.key: a.value for a in by_name["ident"].attributes}
    assert attrs["request_id"].string_value == "otel-1"
