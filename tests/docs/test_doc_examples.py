"""The example plugins of docs/hooks.md (docs/examples/*.py) work in a real in-process server.

Each example is loaded from its file and passed to ``inferd.testing.InProcessServer`` as a plugin;
the checks go through the official tritonclient (HTTP and gRPC).
"""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import (
    BackendContract,
    ContractModel,
    InProcessServer,
    InputSpec,
    free_port,
    identity_config,
    identity_plugin,
    write_repository,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CLIENTS = [(httpclient, "http_url"), (grpcclient, "grpc_url")]


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start(repo: Path, plugins: list[Any], **options: Any) -> InProcessServer:
    return InProcessServer([repo], plugins=plugins, **options).start()


def infer(module: Any, url: str, model: str, arrays: dict[str, np.ndarray]) -> Any:
    client = module.InferenceServerClient(url)
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    try:
        return client.infer(model, inputs)
    finally:
        client.close()


def response_parameters(result: Any) -> dict[str, Any]:
    response = result.get_response()
    if isinstance(response, dict):  # HTTP: JSON
        return dict(response.get("parameters", {}))
    return {k: v.string_param for k, v in response.parameters.items()}  # gRPC: protobuf


# -- backend ---------------------------------------------------------------------------------------

SCALE_CONFIG = """
backend: "scale"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters [ { key: "factor" value: { string_value: "3" } } ]
"""


class TestScaleBackendContract(BackendContract):
    """The backend contract of inferd.testing, run on the example backend (as in docs/hooks.md)."""

    inputs = [InputSpec("INPUT0", "FP32", (4,))]
    plugins = [load_example("scale_backend_plugin")]

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(root, {"triple": {"config.pbtxt": SCALE_CONFIG, "1/.keep": ""}})
        return ContractModel("triple", lambda x: {"OUTPUT0": x["INPUT0"] * 3})


def test_backend_example(tmp_path: Path) -> None:
    plugin = load_example("scale_backend_plugin")
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": SCALE_CONFIG, "1/.keep": ""}})
    server = start(repo, [plugin])
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        for module, url in CLIENTS:
            result = infer(module, getattr(server, url), "triple", {"INPUT0": x})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 3)  # OUTPUT0 by auto-complete
    finally:
        server.stop()


# -- scheduler -------------------------------------------------------------------------------------


TAGGING = 'parameters { key: "inferd_scheduler" value: { string_value: "tagging" } }\n'


def test_scheduler_example(tmp_path: Path) -> None:
    """A model selects the example's scheduler by name, next to the built-in ones; another model
    without the parameter keeps the built-in direct scheduler."""
    plugin = load_example("tagging_scheduler_plugin")
    models = {
        "echo": {"config.pbtxt": identity_config("echo", [("TYPE_FP32", [4])], extra=TAGGING), "1/.keep": ""},
        "plain": {"config.pbtxt": identity_config("plain", [("TYPE_FP32", [4])]), "1/.keep": ""},
    }
    repo = write_repository(tmp_path / "models", models)
    server = start(repo, [identity_plugin, plugin])
    try:
        x = np.ones((1, 4), dtype=np.float32)
        for module, url in CLIENTS:
            result = infer(module, getattr(server, url), "echo", {"INPUT0": x})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
            assert response_parameters(result) == {"scheduler": "tagging"}
            assert response_parameters(infer(module, getattr(server, url), "plain", {"INPUT0": x})) == {}
        stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("echo")
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 2
    finally:
        server.stop()


def _masked(value: Any) -> Any:
    """``value`` with nanosecond durations, timestamps and trace ids zeroed (counts kept)."""
    if isinstance(value, dict):
        return {k: 0 if k in ("ns", "last_inference", "id", "parent_id") else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _record_traffic(root: Path, plugins: list[Any], extra: str = "") -> tuple[Any, Any]:
    """Statistics and trace file of one server after the same requests: rows 1, 2, 3 over both APIs."""
    instances = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    config = identity_config("echo", [("TYPE_FP32", [4])], extra=instances + extra)
    repo = write_repository(root / "models", {"echo": {"config.pbtxt": config, "1/.keep": ""}})
    trace_file = root / "trace.json"
    trace = {"trace_config": [f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=1"]}
    server = start(repo, [identity_plugin, *plugins], extra=trace)
    try:
        for rows in (1, 2, 3, 1):
            for module, url in CLIENTS:
                infer(module, getattr(server, url), "echo", {"INPUT0": np.ones((rows, 4), dtype=np.float32)})
        stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("echo")
    finally:
        server.stop()
    return stats, json.loads(trace_file.read_text())


def test_scheduler_example_records_what_the_direct_scheduler_records(tmp_path: Path) -> None:
    plugin = load_example("tagging_scheduler_plugin")
    tagging = _record_traffic(tmp_path / "tagging", [plugin], TAGGING)
    direct = _record_traffic(tmp_path / "direct", [])
    stats, trace = _masked(tagging[0]), _masked(tagging[1])
    assert (stats, trace) == (_masked(direct[0]), _masked(direct[1]))
    (model,) = stats["model_stats"]
    assert (model["inference_count"], model["execution_count"]) == (14, 8)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in model["batch_stats"]] == [(1, 4), (2, 2), (3, 2)]
    names = [e["timestamps"][0]["name"] for e in trace if "timestamps" in e]
    assert names.count("QUEUE_START") == names.count("COMPUTE_START") == names.count("COMPUTE_END") == 8


# -- cache -----------------------------------------------------------------------------------------


def test_cache_example(tmp_path: Path) -> None:
    plugin = load_example("dict_cache_plugin")
    config = identity_config("echo", [("TYPE_FP32", [4])], extra="response_cache { enable: true }")
    repo = write_repository(tmp_path / "models", {"echo": {"config.pbtxt": config, "1/.keep": ""}})
    server = start(repo, [identity_plugin, plugin], cache_config={"dict": {"max_entries": "10"}})
    try:
        assert server.server.cache is not None and type(server.server.cache).__name__ == "DictCache"
        x = np.full((1, 4), 2.0, dtype=np.float32)
        for module, url in CLIENTS:  # the first call misses, the second (same inputs) hits
            np.testing.assert_array_equal(
                infer(module, getattr(server, url), "echo", {"INPUT0": x}).as_numpy("OUTPUT0"), x
            )
        stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("echo")
        inference = stats["model_stats"][0]["inference_stats"]
        assert inference["cache_miss"]["count"] == 1 and inference["cache_hit"]["count"] == 1
        assert stats["model_stats"][0]["execution_count"] == 1
    finally:
        server.stop()


def test_cache_example_refuses_bad_settings() -> None:
    plugin = load_example("dict_cache_plugin")
    with pytest.raises(Exception, match="max_entries"):
        plugin.create_dict_cache({"max_entries": "zero"})


# -- frontend --------------------------------------------------------------------------------------


def _jsonl(port: int, *messages: Any) -> list[dict[str, Any]]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        stream = sock.makefile("rwb")
        answers = []
        for message in messages:
            stream.write((message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n")
            stream.flush()
            answers.append(json.loads(stream.readline()))
        return answers


def test_frontend_example(tmp_path: Path) -> None:
    frontend = load_example("jsonl_frontend_plugin")
    backend = load_example("scale_backend_plugin")
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": SCALE_CONFIG, "1/.keep": ""}})
    port = free_port()
    server = start(repo, [backend, frontend], extra={"jsonl_port": port})
    try:
        x = np.array([[1.5, 2, 3, 4]], dtype=np.float32)
        ok, bad_shape, unknown, garbage = _jsonl(
            port,
            {"model": "triple", "id": "r1", "inputs": {"INPUT0": x.tolist()}},
            {"model": "triple", "id": "r2", "inputs": {"INPUT0": [1, 2, 3, 4]}},
            {"model": "nope", "id": "r3", "inputs": {}},
            b"{not json",
        )
        expected = infer(httpclient, server.http_url, "triple", {"INPUT0": x}).as_numpy("OUTPUT0")
        assert ok == {"id": "r1", "outputs": {"OUTPUT0": expected.tolist()}}
        assert bad_shape["kind"] == "INVALID_ARG" and "add a leading batch dimension" in bad_shape["error"]
        assert unknown["kind"] == "NOT_FOUND"
        assert garbage["kind"] == "INVALID_ARG"
        # A connection that was answered once and now waits for its next line, open while the server
        # stops (answered first, so the frontend holds it as idle however loaded the machine is).
        idle = socket.create_connection(("127.0.0.1", port), timeout=30)
        idle_stream = idle.makefile("rwb")
        idle_stream.write(b'{"model": "nope", "id": "r5", "inputs": {}}\n')
        idle_stream.flush()
        assert json.loads(idle_stream.readline())["kind"] == "NOT_FOUND"
    finally:
        server.stop()
    assert idle.recv(1) == b""  # the frontend closed the idle connection on stop
    idle_stream.close()
    idle.close()
    # Without the option the factory returns None and the server runs without the frontend.
    server = start(repo, [backend, frontend])
    try:
        assert [type(f).__name__ for f in server.server.frontends if "JsonLines" in type(f).__name__] == []
    finally:
        server.stop()
