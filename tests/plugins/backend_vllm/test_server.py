"""The vLLM backend end to end: a real ``inferd serve`` running vLLM's engine on a tiny random Llama,
called with tritonclient over gRPC streaming and with HTTP generate / generate_stream.

The server is the side-by-side ``inferd serve`` of this folder (its model ``llm``, config completed
from ``model.json``): each engine on the CPU costs about 35 s of CPU to start. The last test here
stops it, and this folder's conftest runs that test after every other test of the folder."""

from __future__ import annotations

import http.client
import json
import queue
import re
import signal
import urllib.request
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.metrics_text import scrape
from tests.plugins.backend_vllm.conftest import SKIP, SideBySide

pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]
PROMPT = "hello world"


def post(server: ServerProcess, route: str, body: dict[str, Any]) -> tuple[int, bytes]:
    return http_call(f"http://{server.http_url}/v2/models/llm/{route}", "POST", json.dumps(body).encode())


def generate(server: ServerProcess, **body: Any) -> dict[str, Any]:
    status, raw = post(server, "generate", {"text_input": PROMPT, **body})
    assert status == 200, raw
    return json.loads(raw)


def sampling(**params: Any) -> str:
    return json.dumps({"temperature": 0, "ignore_eos": True, **params})


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[len(b"data: ") :]) for line in raw.splitlines() if line.startswith(b"data: ")]


@pytest.fixture(scope="module")
def llm_server(side_by_side: SideBySide) -> ServerProcess:
    return side_by_side.inferd


def test_config_is_completed_as_tritons_vllm_backend(llm_server: ServerProcess) -> None:
    with urllib.request.urlopen(f"http://{llm_server.http_url}/v2/models/llm/config") as resp:
        config = json.load(resp)
    assert config["backend"] == "vllm"
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["max_batch_size"] == 0
    inputs = {i["name"]: (i["data_type"], i.get("optional", False)) for i in config["input"]}
    assert inputs["text_input"] == ("TYPE_STRING", False)
    for name in ("stream", "exclude_input_in_output", "return_num_output_tokens"):
        assert inputs[name] == ("TYPE_BOOL", True)
    assert inputs["sampling_parameters"] == ("TYPE_STRING", True)
    outputs = {o["name"]: o["data_type"] for o in config["output"]}
    assert outputs["text_output"] == "TYPE_STRING"
    assert outputs["num_input_tokens"] == outputs["num_output_tokens"] == "TYPE_UINT32"


def test_generate_max_tokens_and_greedy_determinism(llm_server: ServerProcess) -> None:
    extras = {"return_num_output_tokens": True, "return_num_input_tokens": True, "return_finish_reason": True}
    first = generate(llm_server, sampling_parameters=sampling(max_tokens=7), **extras)
    second = generate(llm_server, sampling_parameters=sampling(max_tokens=7), **extras)
    assert first["text_output"] == second["text_output"]
    assert first["num_output_tokens"] == 7
    assert first["finish_reason"] == "length"
    assert first["num_input_tokens"] == 2  # "hello" and " world" are tokens of the trained vocabulary
    assert first["text_output"].startswith(PROMPT)  # exclude_input_in_output defaults to false


def test_exclude_input_in_output_and_request_parameters(llm_server: ServerProcess) -> None:
    full = generate(llm_server, sampling_parameters=sampling(max_tokens=6))["text_output"]
    excluded = generate(llm_server, sampling_parameters=sampling(max_tokens=6), exclude_input_in_output=True)
    assert excluded["text_output"] == full[len(PROMPT) :]
    # Without the tensor, the request's parameters are the sampling parameters (others skipped).
    via_parameters = generate(
        llm_server, parameters={"max_tokens": 6, "temperature": 0, "ignore_eos": True, "not_sampling": 1}
    )
    assert via_parameters["text_output"] == full


def test_generate_stream_deltas_add_up_to_the_whole_text(llm_server: ServerProcess) -> None:
    whole = generate(llm_server, sampling_parameters=sampling(max_tokens=9), exclude_input_in_output=True)
    status, raw = post(
        llm_server,
        "generate_stream",
        {
            "text_input": PROMPT,
            "stream": True,
            "sampling_parameters": sampling(max_tokens=9),
            "return_num_output_tokens": True,
        },
    )
    assert status == 200, raw
    events = sse_events(raw)
    # A response per engine step; the engine merges the deltas of steps its reader has not taken yet.
    assert len(events) > 1
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert sum(e["num_output_tokens"] for e in events) == 9


def test_stop_string_ends_the_text_before_it(llm_server: ServerProcess) -> None:
    text = generate(llm_server, sampling_parameters=sampling(max_tokens=16), exclude_input_in_output=True)[
        "text_output"
    ]
    clean = [i for i in range(2, len(text) - 2) if "\ufffd" not in text[i : i + 2]]
    assert clean, f"no printable pair in {text!r}"
    stop = text[clean[0] : clean[0] + 2]
    got = generate(
        llm_server, sampling_parameters=sampling(max_tokens=16, stop=[stop]), exclude_input_in_output=True,
        return_finish_reason=True,
    )  # fmt: skip
    assert got["text_output"] == text[: text.index(stop)]
    assert got["finish_reason"] == "stop"


def grpc_inputs(prompt: str, params: str, stream: bool = True) -> list[grpcclient.InferInput]:
    arrays = {
        "text_input": (np.array([prompt.encode()], dtype=np.object_), "BYTES"),
        "stream": (np.array([stream]), "BOOL"),
        "sampling_parameters": (np.array([params.encode()], dtype=np.object_), "BYTES"),
    }
    inputs = []
    for name, (array, datatype) in arrays.items():
        tensor = grpcclient.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def test_grpc_stream_concurrent_requests(llm_server: ServerProcess) -> None:
    whole = generate(llm_server, sampling_parameters=sampling(max_tokens=5), exclude_input_in_output=True)
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(llm_server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(4):
            client.async_stream_infer("llm", grpc_inputs(PROMPT, sampling(max_tokens=5)), request_id=f"r{i}",
                                      enable_empty_final_response=True)  # fmt: skip
        texts: dict[str, str] = {f"r{i}": "" for i in range(4)}
        finals = 0
        while finals < 4:
            result, error = results.get(timeout=60)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                finals += 1
            if response.outputs:
                texts[response.id] += result.as_numpy("text_output")[0].decode()
    finally:
        client.stop_stream()
        client.close()
    assert texts == {f"r{i}": whole["text_output"] for i in range(4)}


def cancelled_responses(server: ServerProcess) -> int:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/llm/stats") as resp:
        stats = json.load(resp)["model_stats"][0]
    return sum(int(r.get("cancel", {}).get("count", 0)) for r in stats.get("response_stats", {}).values())


def test_cancelled_grpc_stream_is_aborted_in_the_engine(llm_server: ServerProcess) -> None:
    before = cancelled_responses(llm_server)
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(llm_server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("llm", grpc_inputs(PROMPT, sampling(max_tokens=240)), request_id="long")
    result, error = results.get(timeout=60)  # generating: cancel after the first token
    assert error is None, error
    client.stop_stream(cancel_requests=True)
    client.close()
    # The engine stops the request at its next step and the backend answers CANCELLED (counted by
    # the server's statistics as a cancelled response) instead of producing the other tokens.
    wait_for_cancel(llm_server, before)


def wait_for_cancel(server: ServerProcess, before: int) -> None:
    """Poll the statistics until one more cancelled response is counted (or give up)."""
    for _ in range(200):
        if cancelled_responses(server) > before:
            break
        urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready").close()
    assert cancelled_responses(server) == before + 1


def test_generate_stream_disconnect_is_aborted_in_the_engine(llm_server: ServerProcess) -> None:
    before = cancelled_responses(llm_server)
    host, port = llm_server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"text_input": PROMPT, "stream": True, "sampling_parameters": sampling(max_tokens=240)}
    conn.request("POST", "/v2/models/llm/generate_stream", body=json.dumps(body))
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")  # generating: hang up after the first event
    conn.sock.close()
    conn.close()
    wait_for_cancel(llm_server, before)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"sampling_parameters": "{bad"}, "input 'sampling_parameters' is not valid JSON"),
        ({"sampling_parameters": "[1]"}, "input 'sampling_parameters' must be a JSON object"),
        ({"sampling_parameters": '{"max_tokenz": 3}'}, "unknown sampling parameter 'max_tokenz'"),
        (
            {"sampling_parameters": '{"temperature": -1}'},
            "input 'sampling_parameters': temperature must be non-negative",
        ),
        ({"sampling_parameters": '{"max_tokens": "many"}'}, "'max_tokens' must be int, got 'many'"),
        (
            {"stream": True, "exclude_input_in_output": False},
            "When streaming, `exclude_input_in_output` = False is not allowed.",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_tensor(llm_server: ServerProcess, body: dict[str, Any], fragment: str) -> None:
    status, raw = post(llm_server, "generate", {"text_input": PROMPT, **body})
    assert status == 400, raw
    assert fragment in json.loads(raw)["error"]
    assert generate(llm_server, sampling_parameters=sampling(max_tokens=1))["text_output"].startswith(PROMPT)


def metric(server: ServerProcess, name: str, labels: str) -> float | None:
    """The value of the series ``name{labels...}`` on /metrics, or None."""
    for line in scrape(server).splitlines():
        if line.startswith(name + "{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_vllm_metrics_beside_tritons(llm_server: ServerProcess) -> None:
    labels = 'model_name="llm"'
    before = metric(llm_server, "vllm:prompt_tokens_total", labels) or 0.0
    generated = metric(llm_server, "vllm:generation_tokens_total", labels) or 0.0
    generate(llm_server, sampling_parameters=sampling(max_tokens=4))
    assert metric(llm_server, "vllm:prompt_tokens_total", labels) == before + 2
    assert metric(llm_server, "vllm:generation_tokens_total", labels) == generated + 4
    assert metric(llm_server, "nv_inference_request_success", 'model="llm"') is not None  # Triton's, beside
    assert metric(llm_server, "vllm:num_requests_running", labels) == 0  # the cancelled ones freed their slot


def test_stopping_names_the_model_in_vllms_lines_and_ends_without_a_traceback(side_by_side: SideBySide) -> None:
    """Last in this folder (the folder's conftest moves it there): it stops the shared server, which
    leaves none of vLLM's socket files behind."""
    llm_server = side_by_side.inferd
    assert llm_server.proc is not None
    # each engine binds its sockets in a directory of its own (vLLM's default: the temporary directory itself)
    engines = [p for p in side_by_side.inferd_tmp.iterdir() if p.name.startswith("inferd-vllm-")]
    assert len(engines) == 2 and all(any(f.is_socket() for f in d.iterdir()) for d in engines), engines
    llm_server.proc.send_signal(signal.SIGINT)
    assert llm_server.proc.wait(120) == 0
    log = llm_server.log()
    assert "Traceback" not in log and "Exception ignored" not in log, log
    # vLLM's own lines name the model, each engine's process its own (the two engines load at once)
    assert "[model 'llm'] (EngineCore pid=" in log and "[model 'embed'] (EngineCore pid=" in log, log
    assert "MPClient" not in log and "Loading weights took" not in log  # its INFO lines: DEBUG to inferd
    assert re.search(r"unloaded 2 models; inferd stopped in \d+\.\d\d s\n", log), log
    left = [p for p in side_by_side.inferd_tmp.rglob("*") if p.is_socket() or p.name.startswith("inferd-vllm-")]
    assert left == [], left
