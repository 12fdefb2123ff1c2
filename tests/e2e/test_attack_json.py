"""Client JSON nested deeper than 64 levels is a 400 naming the problem on every endpoint that
parses JSON (KServe HTTP, generate, repository, settings, shared memory, the OpenAI frontend),
never a 500 from a ``RecursionError``; and the server keeps serving."""

from __future__ import annotations

import json

import pytest

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.http_calls import http_call
from tests.servers import Servers

DEEP = 100_000
TOO_DEEP = "nested more than 64 levels deep"
INPUTS = (
    '{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},'
    '{"name":"INPUT1","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}'
)


def _array(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    args = ["--model-control-mode=explicit", "--load-model=add_sub", "--openai-port=0", "--openai-address=127.0.0.1"]
    return serve({"add_sub": models.add_sub()}, *args)


def _post(url: str, body: str) -> tuple[int, str]:
    status, raw = http_call(url, "POST", body.encode(), {"Content-Type": "application/json"})
    return status, raw.decode()


def _bodies(depth: int) -> dict[str, tuple[str, str]]:
    """Path and body of each endpoint that parses JSON, with a value nested ``depth`` deep."""
    deep_object, deep_array = _object(depth), _array(depth)
    return {
        "document": ("/v2/models/add_sub/infer", deep_array),
        "request parameters": (
            "/v2/models/add_sub/infer",
            f'{{"parameters":{{"x":{deep_object}}},"inputs":[{INPUTS}]}}',
        ),
        "output parameters": (
            "/v2/models/add_sub/infer",
            f'{{"inputs":[{INPUTS}],"outputs":[{{"name":"OUTPUT0","parameters":{{"x":{deep_object}}}}}]}}',
        ),
        "input parameters": (
            "/v2/models/add_sub/infer",
            f'{{"inputs":[{{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],'
            f'"parameters":{{"x":{deep_array}}}}}]}}',
        ),
        "tensor data": (
            "/v2/models/add_sub/infer",
            f'{{"inputs":[{{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,{deep_array}]}}]}}',
        ),
        "long integer": (
            "/v2/models/add_sub/infer",
            f'{{"id":"1","parameters":{{"n":12345678901234567890,"x":{deep_object}}},"inputs":[{INPUTS}]}}',
        ),
        "generate": ("/v2/models/add_sub/generate", f'{{"x":{deep_object}}}'),
        "load": ("/v2/repository/models/add_sub/load", f'{{"parameters":{deep_object}}}'),
        "index": ("/v2/repository/index", deep_array),
        "trace": ("/v2/trace/setting", f'{{"trace_rate":{deep_array}}}'),
        "logging": ("/v2/logging", f'{{"log_info":{deep_array}}}'),
        "shared memory": ("/v2/systemsharedmemory/region/r/register", f'{{"key":{deep_array},"byte_size":4}}'),
    }


#: Infer bodies refused for what they hold, not their depth, until the parser's own limit (1024
#: levels): a document that is no object, data that does not follow the shape, and parameters that
#: are no plain values (Triton's rule: a parameter is a string, a boolean or a number).
SHAPED = {"document", "tensor data", "request parameters", "output parameters", "long integer"}


@pytest.mark.parametrize("depth", [65, 1000, DEEP])
def test_deep_json_is_a_400_naming_the_nesting(server: ServerProcess, depth: int) -> None:
    for what, (path, body) in _bodies(depth).items():
        status, text = _post(f"http://{server.http_url}{path}", body)
        assert status == 400, (what, status, text[:300])
        if what in SHAPED and depth <= 1024:
            continue  # an infer request's document is not walked: refused for what it holds (tested below)
        assert TOO_DEEP in json.loads(text)["error"], (what, text[:300])
    assert _post(f"http://{server.http_url}/v2/models/add_sub/infer", f'{{"inputs":[{INPUTS}]}}')[0] == 200


def test_infer_requests_name_what_is_wrong_with_deep_values(server: ServerProcess) -> None:
    url = f"http://{server.http_url}/v2/models/add_sub/infer"
    status, text = _post(url, _array(1000))
    assert (status, json.loads(text)["error"]) == (400, "inference request must be a JSON object")
    status, text = _post(url, _bodies(1000)["tensor data"][1])
    assert status == 400 and "nested 'data' must follow shape [1, 4]" in json.loads(text)["error"], text[:300]
    status, text = _post(url, _bodies(65)["output parameters"][1])
    assert status == 400 and json.loads(text)["error"].startswith(
        "parameter 'outputs.parameters.x' has invalid type. It should be either 'int', 'bool', or 'string'."
    ), text[:300]
    status, text = _post(url, _bodies(1000)["request parameters"][1])
    assert status == 400 and json.loads(text)["error"].startswith("parameter 'x' has invalid type."), text[:300]


def test_nesting_up_to_the_limit_is_read(server: ServerProcess) -> None:
    body = (  # 64 levels in all: the document, inputs, an input, its parameters, then 60 arrays
        f'{{"inputs":[{{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],'
        f'"parameters":{{"x":{_array(60)}}}}},{INPUTS.split("},", 1)[1]}]}}'
    )
    status, text = _post(f"http://{server.http_url}/v2/models/add_sub/infer", body)
    assert status == 200, text[:300]
    status, text = _post(f"http://{server.http_url}/v2/repository/index", _array(64))
    assert status == 200, text[:300]


@pytest.mark.parametrize("depth", [65, DEEP])
def test_the_openai_frontend_refuses_deep_json_too(server: ServerProcess, depth: int) -> None:
    port = server.ports["openai"]
    for path in ("/v1/completions", "/v1/chat/completions"):
        status, text = _post(f"http://127.0.0.1:{port}{path}", f'{{"model":"m","messages":{_array(depth)}}}')
        assert status == 400, text[:300]
        error = json.loads(text)["error"]
        assert error["message"].startswith("We could not parse the JSON body of your request: ")
        assert TOO_DEEP in error["message"]
    assert _post(f"http://{server.http_url}/v2/models/add_sub/infer", f'{{"inputs":[{INPUTS}]}}')[0] == 200


def test_an_integer_of_thousands_of_digits_is_refused_in_inferds_words(server: ServerProcess) -> None:
    """Python refuses to read an integer of more than 4300 digits; the 400 says so without its advice
    to call ``sys.set_int_max_str_digits()``."""
    number = "7" * 5000
    for path, body in [("/v2/repository/index", f'{{"ready":{number}}}'),
                       ("/v2/models/add_sub/infer", f'{{"parameters":{{"n":{number}}},"inputs":[{INPUTS}]}}'),
                       ("/v2/logging", f'{{"log_verbose_level":{number}}}')]:  # fmt: skip
        status, text = _post(f"http://{server.http_url}{path}", body)
        error = json.loads(text)["error"]
        assert status == 400 and "an integer has more than 4300 digits" in error, (path, error[:300])
        assert "sys." not in error and "Exceeds the limit" not in error, (path, error[:300])
