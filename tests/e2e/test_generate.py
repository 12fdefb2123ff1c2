"""The generate extension over HTTP: /generate and /generate_stream (server-sent events).

Expected status codes and bodies were taken from Triton 2.51 with the same models.
"""

from __future__ import annotations

import http.client
import json
import textwrap

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

# Decoupled: COUNT responses (TEXT-i, i, the request parameters), then the final flag. TEXT "boom"
# sends one response and then an error; a negative COUNT sends only an error.
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }, { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
REPEAT_PY = source("generate_repeat")

# Not decoupled: text_output = upper(text_input); scaled = 2 * factor (optional, default [1]).
UPPER_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "factor" data_type: TYPE_FP32 dims: [ -1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }, { name: "scaled" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
UPPER_PY = source("generate_upper")

# Batching model: a generate request is one row, so "x": [1, 2] is a [1, 2] tensor.
BATCHED_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "y" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""
BATCHED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() + 1)])
                for r in requests]
"""


def model(config: str, code: str) -> dict[str, str]:
    return {"config.pbtxt": textwrap.dedent(config), "1/model.py": textwrap.dedent(code)}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "repeat": model(REPEAT_CONFIG, REPEAT_PY),
        "upper": model(UPPER_CONFIG, UPPER_PY),
        "batched": model(BATCHED_CONFIG, BATCHED_PY),
    }
    return serve(repo)


def post(server, path: str, body: object) -> tuple[int, str, bytes]:
    """POST raw JSON (or a raw string); returns status, content type and body."""
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, resp.getheader("content-type", ""), payload


def events(payload: bytes) -> list[dict]:
    """The JSON objects of an SSE body (``data: {...}`` blocks separated by a blank line)."""
    blocks = [b for b in payload.decode().split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks), payload
    return [json.loads(b[len("data: ") :]) for b in blocks]


# -- generate_stream -----------------------------------------------------------------------------


def test_stream_sends_every_response_of_a_decoupled_model_in_order(server):
    status, ctype, payload = post(server, "/v2/models/repeat/generate_stream",
                                  {"TEXT": "hi", "COUNT": 4, "temperature": 0.5, "parameters": {"top_k": 3}})  # fmt: skip
    assert status == 200
    assert ctype.startswith("text/event-stream")
    got = events(payload)
    assert [e["TEXT_OUT"] for e in got] == ["hi-0", "hi-1", "hi-2", "hi-3"]
    assert [e["INDEX"] for e in got] == [0, 1, 2, 3]
    assert all(e["model_name"] == "repeat" and e["model_version"] == "1" for e in got)
    # Keys that are not inputs became request parameters, next to the "parameters" object's.
    assert json.loads(got[0]["PARAMS"]) == {"temperature": 0.5, "top_k": 3}


def test_stream_of_zero_responses_is_empty(server):
    status, ctype, payload = post(server, "/v2/models/repeat/generate_stream", {"TEXT": "hi", "COUNT": 0})
    assert (status, payload) == (200, b"")
    assert ctype.startswith("text/event-stream")


def test_stream_of_a_plain_model_is_one_event(server):
    status, _, payload = post(server, "/v2/models/upper/versions/1/generate_stream", {"text_input": "abc"})
    assert status == 200
    assert events(payload) == [{"model_name": "upper", "model_version": "1", "scaled": 2.0, "text_output": "ABC"}]


def test_stream_errors_arrive_as_error_events(server):
    # The first response is an error: status 400, still an event stream (as Triton).
    status, ctype, payload = post(server, "/v2/models/repeat/generate_stream", {"TEXT": "hi", "COUNT": -1})
    assert status == 400 and ctype.startswith("text/event-stream")
    assert events(payload) == [{"error": "count must be >= 0"}]
    # An error after a good response: the status is already 200; the error is an event.
    status, _, payload = post(server, "/v2/models/repeat/generate_stream", {"TEXT": "boom", "COUNT": 1})
    got = events(payload)
    assert status == 200
    assert got[0]["TEXT_OUT"] == "boom-0" and got[1] == {"error": "exploded"}


def test_stream_refuses_a_bad_request_before_streaming(server):
    status, ctype, payload = post(server, "/v2/models/repeat/generate_stream", {"TEXT": "hi"})
    assert status == 400 and ctype == "application/json"
    assert "missing required input(s) ['COUNT']" in json.loads(payload)["error"]
    status, ctype, payload = post(server, "/v2/models/nope/generate_stream", {"TEXT": "hi"})
    assert status == 404 and ctype == "application/json"
    assert json.loads(payload) == {"error": "Request for unknown model: 'nope' is not found"}


# -- generate ------------------------------------------------------------------------------------


def test_generate_returns_one_flat_object(server):
    status, ctype, payload = post(server, "/v2/models/upper/generate", {"text_input": "abc", "factor": [1.5, 2.5]})
    assert (status, ctype) == (200, "application/json")
    assert json.loads(payload) == {
        "model_name": "upper", "model_version": "1", "scaled": [3.0, 5.0], "text_output": "ABC"
    }  # fmt: skip
    # Keys come sorted, as Triton writes them.
    assert list(json.loads(payload)) == sorted(json.loads(payload))


@pytest.mark.parametrize(
    ("factor", "scaled"),
    [(3, 6.0), ([3], 6.0), ([1, 2, 3], [2.0, 4.0, 6.0]), ([[1, 2], [3, 4]], [2.0, 4.0, 6.0, 8.0])],
)
def test_generate_infers_input_shapes_from_the_config(server, factor, scaled):
    status, _, payload = post(server, "/v2/models/upper/generate", {"text_input": ["abc"], "factor": factor})
    assert status == 200, payload
    assert json.loads(payload)["scaled"] == scaled


def test_generate_on_a_batching_model_sends_one_row(server):
    for x in ([1, 2], [[1, 2]]):
        status, _, payload = post(server, "/v2/models/batched/generate", {"x": x})
        assert status == 200
        assert json.loads(payload)["y"] == [2, 3]
    status, _, payload = post(server, "/v2/models/batched/generate", {"x": 3})
    assert status == 400
    assert "cannot convert input 'x' of model 'batched' to a tensor of shape [1,2]" in json.loads(payload)["error"]


def test_generate_on_a_decoupled_model_needs_exactly_one_response(server):
    status, _, payload = post(server, "/v2/models/repeat/generate", {"TEXT": "hi", "COUNT": 1})
    assert status == 200 and json.loads(payload)["TEXT_OUT"] == "hi-0"
    for count in (0, 3):
        status, _, payload = post(server, "/v2/models/repeat/generate", {"TEXT": "hi", "COUNT": count})
        assert status == 400  # Triton 2.51 sends this error with status 200
        assert json.loads(payload)["error"].startswith("generate expects model to produce exactly 1 response")


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v2/models/nope/generate", {"a": 1}, 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/models/upper/versions/7/generate", {"text_input": "a"}, 404, "'upper' version 7 is not found"),
        ("/v2/models/upper/generate", {"factor": [1.0]}, 400, "missing required input(s) ['text_input']"),
        ("/v2/models/upper/generate", {"text_input": "a", "factor": "x"}, 400, "input 'factor'"),
        ("/v2/models/upper/generate", {"text_input": "a", "extra": [1]}, 400,
         "parameter 'extra' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ("/v2/models/upper/generate", "not json", 400, "failed to parse the request JSON buffer"),
        ("/v2/models/upper/generate", [1, 2], 400, "generate request must be a JSON object"),
        ("/v2/models/upper/generate", {"text_input": "fail"}, 400, "asked to fail"),
    ],
)  # fmt: skip
def test_generate_errors(server, path, body, status, message):
    got, ctype, payload = post(server, path, body)
    assert (got, ctype) == (status, "application/json")
    assert message in json.loads(payload)["error"]


# -- /infer on a decoupled model -----------------------------------------------------------------


def test_infer_on_a_decoupled_model_is_refused_with_501(server):
    client = httpclient.InferenceServerClient(server.http_url)
    text = httpclient.InferInput("TEXT", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    count = httpclient.InferInput("COUNT", [1], "INT32")
    count.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("repeat", [text, count])
    client.close()
    assert info.value.status() == "501"  # Triton: "HTTP end point doesn't support models with decoupled ..."
    assert "decoupled" in info.value.message()
