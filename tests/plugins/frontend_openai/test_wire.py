"""The OpenAI API on the wire: raw SSE events, error bodies, a client that goes away mid-stream,
and ``--openai-tokenizer``."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from inferd.testing import ServerProcess, free_port

from .chat_model import write_chat_model
from .conftest import OpenAIServer

MESSAGES = [{"role": "user", "content": "hi"}]


def events(raw: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE body, each event ended by a blank line."""
    assert raw.endswith(b"\n\n")
    parts = raw[:-2].split(b"\n\n")
    assert all(p.startswith(b"data: ") for p in parts), raw
    return [p[len(b"data: ") :] for p in parts]


def test_chat_stream_on_the_wire(openai_server: OpenAIServer) -> None:
    body = {"model": "chat", "messages": MESSAGES, "max_tokens": 2, "stream": True}
    with httpx.stream("POST", f"{openai_server.base_url}/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(response.iter_raw())
    payloads = events(raw)
    assert payloads[-1] == b"[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert [set(c) for c in chunks] == [{"id", "object", "created", "model", "choices"}] * 4
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""}, {"content": chunks[1]["choices"][0]["delta"]["content"]},
        {"content": " alpha"}, {}
    ]  # fmt: skip
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert all(c["choices"][0]["logprobs"] is None and c["choices"][0]["index"] == 0 for c in chunks)


def test_completion_stream_with_usage_on_the_wire(openai_server: OpenAIServer) -> None:
    body = {"model": "chat", "prompt": "hi", "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}}
    raw = httpx.post(f"{openai_server.base_url}/completions", json=body, timeout=30).content
    chunks = [json.loads(p) for p in events(raw)[:-1]]
    assert [c["choices"] for c in chunks] == [
        [{"index": 0, "text": chunks[0]["choices"][0]["text"], "logprobs": None, "finish_reason": None}],
        [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}],
        [],
    ]
    assert [c["usage"] is None for c in chunks] == [True, True, False]
    usage = chunks[-1]["usage"]
    assert (
        usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and usage["completion_tokens"] == 1
    )
    assert all(c["object"] == "text_completion" for c in chunks)


def test_error_after_the_stream_started_is_an_error_event(openai_server: OpenAIServer) -> None:
    body = {"model": "chat", "prompt": ["hi", "please fail"], "max_tokens": 1, "stream": True}
    raw = httpx.post(f"{openai_server.base_url}/completions", json=body, timeout=30).content
    payloads = events(raw)
    assert payloads[-1] == b"[DONE]"
    errors = [json.loads(p) for p in payloads[:-1] if b'"error"' in p]
    assert errors == [{"error": {"message": "the model refuses to fail", "type": "server_error", "param": None,
                                 "code": None}}]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/chat/completions", b"{not json", 400, "We could not parse the JSON body of your request"),
        ("POST", "/chat/completions", b"[1]", 400, "the request body must be a JSON object"),
        ("POST", "/completions", b'{"prompt": "x"}', 400, "you must provide a model parameter"),
        ("POST", "/completions", b'{"model": "chat", "prompt": [1, 2]}', 400, "model 'chat' takes no token ids"),
        ("GET", "/nowhere", b"", 404, "Invalid URL (GET /v1/nowhere)"),
        ("GET", "/completions", b"", 405, "Method GET is not allowed on /v1/completions"),
    ],
)
def test_error_bodies(openai_server: OpenAIServer, method: str, path: str, body: bytes, status: int,
                      message: str) -> None:  # fmt: skip
    response = httpx.request(method, openai_server.base_url + path, content=body, timeout=30)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"].startswith(message)


def test_model_without_a_tokenizer_is_400(openai_server: OpenAIServer) -> None:
    body = {"model": "bare", "prompt": "hi"}
    response = httpx.post(f"{openai_server.base_url}/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("model 'bare' has no tokenizer: put tokenizer.json")


def _response_counts(stats: dict[str, object]) -> tuple[int, int]:
    """(successful responses, cancelled responses) in a model's response_stats."""
    per_index = stats.get("response_stats", {})
    assert isinstance(per_index, dict)
    success = sum(r["success"]["count"] for r in per_index.values())
    cancel = sum(r["cancel"]["count"] for r in per_index.values())
    return success, cancel


def test_client_gone_mid_stream_cancels_the_request(openai_server: OpenAIServer) -> None:
    before = _response_counts(openai_server.stats("chat"))
    body = json.dumps({"model": "chat", "prompt": "slowly", "max_tokens": 2000, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", openai_server.port, timeout=30)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    for _ in range(3):  # three events arrived: the model is generating
        assert response.readline().startswith(b"data: ")
        assert response.readline() == b"\n"
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.monotonic() + 20
    while (after := _response_counts(openai_server.stats("chat")))[1] == before[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after[1] == before[1] + 1  # the model saw is_cancelled() and answered CANCELLED
    assert after[0] - before[0] < 2000  # it stopped long before its 2000 words


def test_openai_tokenizer_flag_serves_every_model_with_that_tokenizer(tmp_path: Path) -> None:
    shared = tmp_path / "tokenizer"
    write_chat_model(tmp_path / "models", "bare", tokenizer=shared)
    args = ["--openai-port", "0", "--openai-tokenizer", str(shared)]
    with ServerProcess([tmp_path / "models"], args) as server:
        port = server.ports["openai"]
        body = {"model": "bare", "messages": MESSAGES, "max_tokens": 1}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30).json()
    prompt_tokens = reply["usage"]["prompt_tokens"]
    assert reply["choices"][0]["message"]["content"] == str(prompt_tokens)  # the model's own count agrees


def test_allow_openai_false_serves_no_openai_api(tmp_path: Path) -> None:
    write_chat_model(tmp_path / "models", "chat")
    port = free_port()
    flags = ["--openai-port", str(port), "--allow-openai=false"]
    with ServerProcess([tmp_path / "models"], flags), pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)


def test_openai_port_in_use_is_a_start_up_error(tmp_path: Path) -> None:
    write_chat_model(tmp_path / "models", "chat")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ServerProcess([tmp_path / "models"], ["--openai-port", str(port), "--openai-address", "127.0.0.1"])
        done = subprocess.run(command.command(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"error: OpenAI frontend cannot bind 127.0.0.1:{port}: Address already in use" in done.stderr


def test_default_port_in_use_starts_without_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    from inferd_frontend_openai import hooks

    from inferd.testing import InProcessServer
    from inferd_backend_python import hooks as python_backend

    write_chat_model(tmp_path / "models", "chat")  # a model it serves: it tries to open the port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(hooks, "DEFAULT_PORT", taken.getsockname()[1])  # stands in for 9000 taken
        with InProcessServer([tmp_path / "models"], plugins=[hooks, python_backend]) as server:
            assert httpx.get(f"http://{server.http_url}/v2/health/ready", timeout=10).status_code == 200
    assert any(
        "serving without the OpenAI API (set --openai-port to serve it)" in r.getMessage() for r in caplog.records
    )


def test_default_port_is_not_opened_without_a_model_it_serves(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from inferd_frontend_openai import hooks

    from inferd.testing import InProcessServer

    (tmp_path / "models").mkdir()
    caplog.set_level(logging.DEBUG, logger="inferd_frontend_openai")
    with InProcessServer([tmp_path / "models"], plugins=[hooks]) as server:
        assert httpx.get(f"http://{server.http_url}/v2/health/ready", timeout=10).status_code == 200
        (openai,) = [f for f in server.server.frontends if f.name == "OpenAI"]
        assert openai.server is None
    assert any("OpenAI API not served: no loaded model" in r.getMessage() for r in caplog.records)


#: vLLM sampling fields a Python model cannot apply, each with a value that asks for something.
VLLM_SAMPLING = [("ignore_eos", True), ("min_tokens", 2), ("stop_token_ids", [3]), ("top_k", 5), ("min_p", 0.1),
                 ("repetition_penalty", 1.2), ("skip_special_tokens", False), ("allowed_token_ids", [4, 5]),
                 ("bad_words", ["alpha"]), ("vllm_xargs", {"a": 1})]  # fmt: skip
#: vLLM fields inferd serves on no model, per endpoint.
NOT_SERVED = [("chat/completions", "use_beam_search", True), ("completions", "length_penalty", 0.5),
              ("completions", "prompt_logprobs", 0), ("chat/completions", "return_token_ids", True),
              ("completions", "suffix", "end"), ("chat/completions", "echo", True), ("completions", "priority", 1),
              ("chat/completions", "add_special_tokens", True), ("completions", "add_special_tokens", False),
              ("chat/completions", "parallel_tool_calls", False), ("completions", "truncate_prompt_tokens", 4)]  # fmt: skip


def _post(server: OpenAIServer, path: str, body: dict) -> httpx.Response:
    base = {"model": "chat", "max_tokens": 4}
    base.update({"messages": MESSAGES} if path.startswith("chat") else {"prompt": "hi"})
    return httpx.post(f"{server.base_url}/{path}", json={**base, **body}, timeout=60)


@pytest.mark.parametrize(("name", "value"), VLLM_SAMPLING)
def test_a_vllm_sampling_field_a_python_model_cannot_apply_is_refused_by_name(
    openai_server: OpenAIServer, name: str, value: object
) -> None:
    for path in ("chat/completions", "completions"):
        response = _post(openai_server, path, {name: value})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == name and f"model 'chat' does not take '{name}'" in error["message"]


@pytest.mark.parametrize(("path", "name", "value"), NOT_SERVED)
def test_a_vllm_field_inferd_does_not_serve_is_refused_by_name(
    openai_server: OpenAIServer, path: str, name: str, value: object
) -> None:
    response = _post(openai_server, path, {name: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == name and error["message"].startswith(f"'{name}' is not supported by this server")


def test_vllm_defaults_and_unknown_fields_ask_for_nothing(openai_server: OpenAIServer) -> None:
    """vLLM's defaults (as aiperf and the openai client may send them) and names neither OpenAI nor
    vLLM knows (ignored, as vllm serve ignores them) are served."""
    defaults = {"ignore_eos": False, "skip_special_tokens": True, "top_k": None, "stop_token_ids": [],
                "min_tokens": 0, "use_beam_search": False, "length_penalty": 1.0, "priority": 0,
                "include_stop_str_in_output": False, "nvext": {"ignore_eos": True}, "some_field": 1}  # fmt: skip
    for path in ("chat/completions", "completions"):
        response = _post(openai_server, path, defaults)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(("name", "value", "kind"), [("ignore_eos", "yes", "a boolean"), ("min_tokens", 1.5, "an integer"),
                                                      ("stop_token_ids", [-1], "an array of token ids"),
                                                      ("bad_words", "x", "an array of strings")])  # fmt: skip
def test_a_vllm_field_of_the_wrong_kind_is_refused_by_name(
    openai_server: OpenAIServer, name: str, value: object, kind: str
) -> None:
    error = _post(openai_server, "completions", {name: value}).json()["error"]
    assert error["param"] == name and error["message"].startswith(f"'{name}' must be {kind}")


@pytest.mark.parametrize("stream", [False, True])
def test_include_stop_str_in_output_keeps_the_stop_string(openai_server: OpenAIServer, stream: bool) -> None:
    """The frontend cuts stop strings for every backend: with vLLM's flag it cuts after the stop string.
    The model says its prompt's token count, then alpha beta gamma ... (seed 0)."""
    texts = []
    for include in (False, True):
        body = {"prompt": "hi", "seed": 0, "max_tokens": 8, "stop": ["gamma"], "stream": stream,
                "include_stop_str_in_output": include}  # fmt: skip
        response = _post(openai_server, "completions", body)
        assert response.status_code == 200, response.text
        if stream:
            chunks = [json.loads(e) for e in events(response.content)[:-1]]
            texts.append(("".join(c["choices"][0]["text"] for c in chunks), chunks[-1]["choices"][0]["finish_reason"]))
        else:
            choice = response.json()["choices"][0]
            texts.append((choice["text"], choice["finish_reason"]))
    count = texts[0][0].split()[0]
    assert texts == [(f"{count} alpha beta ", "stop"), (f"{count} alpha beta gamma", "stop")]
