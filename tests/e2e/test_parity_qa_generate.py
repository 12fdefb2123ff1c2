"""The generate endpoint's error sentences as Triton's own QA (``qa/L0_http/generate_endpoint_test.py``)
checks them, against a real ``inferd serve`` over raw HTTP: Triton's sentence first, inferd's hint after.

Each constant is what the real Triton 2.51 answered to the same body on ``generate`` and
``generate_stream`` (a model with the QA model's PROMPT and STREAM inputs).
"""

from __future__ import annotations

import json

import pytest

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.python_models import python_model
from tests.servers import Servers

# Observed from Triton 2.51 (400; Triton puts "[request id: <id_unknown>] " before it): an input
# given twice in the body. QA's four bodies; the first input given twice is named.
ALREADY_EXISTS = "input '{}' already exists in request"
# Observed from Triton 2.51 (400): an object, a list or null inside "parameters".
CONVERTING = (
    "Converting keyword: 'parameters': parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'."
)
# Observed from Triton 2.51 (400): an object as a top-level key that is not an input.
INVALID_TYPE = "parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'."
# Observed from Triton 2.51 (500 there; inferd answers 400, a client error): "parameters": 1.
NOT_AN_OBJECT = "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
ENDPOINTS = ("generate", "generate_stream")


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"gen": python_model("qa_prompt_stream")})


def _error(server: ServerProcess, endpoint: str, body: str) -> tuple[int, str]:
    status, reply = http_call(f"http://{server.http_url}/v2/models/gen/{endpoint}", "POST", body.encode())
    return status, json.loads(reply)["error"] if status != 200 else reply.decode()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    ("body", "twice"),
    [
        ('{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate"}', "PROMPT"),
        ('{"PROMPT": "hello", "STREAM": false, "STREAM": false}', "STREAM"),
        ('{"PROMPT": "hello", "STREAM": false, "PROMPT": "duplicate", "STREAM": true}', "PROMPT"),
        ('{"PROMPT": "hello", "STREAM": false, "STREAM": true, "PROMPT": "duplicate"}', "STREAM"),
    ],
)
def test_an_input_given_twice(server: ServerProcess, endpoint: str, body: str, twice: str) -> None:
    status, message = _error(server, endpoint, body)
    assert status == 400
    assert (
        message
        == f"{ALREADY_EXISTS.format(twice)}; generate request has the key '{twice}' more than once in one object"
    )


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_parameters_sentences(server: ServerProcess, endpoint: str) -> None:
    base = '{"PROMPT": "hello", "STREAM": false, '
    for inner, name in (('{"nested": {"twice": 1}}', "nested"), ('{"n": [1]}', "n"), ('{"n": null}', "n")):
        assert _error(server, endpoint, base + f'"parameters": {inner}}}') == (400, CONVERTING.format(name))
    assert _error(server, endpoint, base + '"PARAMS": {"PARAM_0": 0}}') == (400, INVALID_TYPE.format("PARAMS"))
    assert _error(server, endpoint, base + '"parameters": 1}') == (400, f"{NOT_AN_OBJECT}; got 1")
    status, reply = _error(server, endpoint, base + '"parameters": {"REPETITION": 3}}')
    assert status == 200 and '"TEXT":"hello"' in reply


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_other_keys_given_twice_are_refused(server: ServerProcess, endpoint: str) -> None:
    """Triton 2.51 accepts these (one of the values is kept): inferd refuses them (the
    differences in docs/configuration.md)."""
    for body, key in (('{"PROMPT": "a", "STREAM": false, "x": 1, "x": 2}', "x"),
                      ('{"PROMPT": "a", "STREAM": false, "parameters": {"x": 1, "x": 2}}', "x"),
                      ('{"PROMPT": "a", "STREAM": false, "parameters": {}, "parameters": {}}', "parameters")):  # fmt: skip
        assert _error(server, endpoint, body) == (
            400,
            f"generate request has the key '{key}' more than once in one object",
        )
