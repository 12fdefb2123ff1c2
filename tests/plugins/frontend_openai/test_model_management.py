"""Triton's OpenAI model management (server PR #8682) on a real ``inferd serve``:
``--model-control-mode explicit`` with ``--load-model``, and ``POST /v1/models/{model}/load`` /
``/unload`` with the status codes and bodies Triton's frontend answers (its
``tests/test_model_management.py``), behind ``--http-restricted-api model-repository`` as the v2
repository API's load and unload are."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
import requests

from inferd.testing import ServerProcess
from tests.lazy import lazy_import

from .chat_model import write_chat_model
from .conftest import OpenAIServer

openai = lazy_import("openai")

#: The header ``--http-restricted-api model-repository:...`` asks of a load or unload.
ADMIN = {"admin-key": "s3cret"}


class Explicit:
    """The server started with ``--model-control-mode explicit --load-model chat``."""

    def __init__(self, process: ServerProcess) -> None:
        self.process = process
        self.port = process.ports["openai"]
        self.base = f"http://127.0.0.1:{self.port}"

    def post(self, model: str, action: str, headers: dict[str, str] | None = None) -> requests.Response:
        return requests.post(f"{self.base}/v1/models/{model}/{action}", headers=ADMIN if headers is None else headers)

    def listed(self) -> list[str]:
        return [m.id for m in openai.OpenAI(base_url=f"{self.base}/v1", api_key="unused").models.list()]


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explicit]:
    root = tmp_path_factory.mktemp("explicit")
    repo = root / "models"
    for name in ("chat", "plain", "other"):
        write_chat_model(repo, name)
    args = ["--openai-port", "0", "--openai-address", "127.0.0.1", "--model-control-mode", "explicit",
            "--load-model", "chat", "--http-restricted-api", "model-repository:admin-key=s3cret"]  # fmt: skip
    with ServerProcess([repo], args) as process:
        yield Explicit(process)


def _detail(response: requests.Response) -> str:
    """Triton's ``detail`` (FastAPI's field), which must repeat OpenAI's ``error.message``."""
    body = response.json()
    assert body["detail"] == body["error"]["message"], body
    return str(body["detail"])


def test_only_the_load_model_models_are_served_at_start(explicit: Explicit) -> None:
    assert explicit.listed() == ["chat"]


def test_load_answers_the_model_entry_and_serves_it_then_unload_removes_it(explicit: Explicit) -> None:
    response = explicit.post("plain", "load")
    assert response.status_code == 200, response.text
    entry = response.json()
    assert (entry["id"], entry["object"]) == ("plain", "model") and entry["created"] > 0
    assert explicit.listed() == ["chat", "plain"]
    client = openai.OpenAI(base_url=f"{explicit.base}/v1", api_key="unused")
    reply = client.completions.create(model="plain", prompt="the quick brown fox", max_tokens=3)
    assert reply.choices[0].text.split()[1:] == ["alpha", "beta"]  # the model's words after its token count

    response = explicit.post("plain", "unload")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "success", "model": "plain"}
    assert explicit.listed() == ["chat"]
    assert requests.get(f"{explicit.base}/v1/models/plain").status_code == 404
    # and back again
    assert explicit.post("plain", "load").status_code == 200
    assert explicit.listed() == ["chat", "plain"]
    assert explicit.post("plain", "unload").status_code == 200


def test_loading_a_loaded_model_and_unloading_an_unloaded_one_are_400(explicit: Explicit) -> None:
    response = explicit.post("chat", "load")
    assert response.status_code == 400
    assert _detail(response).startswith("Model 'chat' is already loaded")
    response = explicit.post("other", "unload")
    assert response.status_code == 400
    assert _detail(response) == "Unknown model: other"


def test_a_model_not_in_the_repository_fails_to_load_with_500(explicit: Explicit) -> None:
    response = explicit.post("nosuch", "load")
    assert response.status_code == 500, response.text
    assert _detail(response).startswith("Failed to load model 'nosuch': ")
    assert "nosuch" not in explicit.listed()


@pytest.mark.parametrize(("name", "status"), [("..", 400), ("a/b", 404), ("chat/", 404), ("", 404)])
def test_a_name_that_is_no_model_name_is_answered_as_triton_answers_it(
    explicit: Explicit, name: str, status: int
) -> None:
    for action in ("load", "unload"):
        conn = http.client.HTTPConnection("127.0.0.1", explicit.port, timeout=10)
        conn.request("POST", f"/v1/models/{name}/{action}", headers=ADMIN)  # raw: clients remove dot segments
        response = conn.getresponse()
        assert response.status == status, (action, response.read())
        conn.close()
    assert explicit.listed() == ["chat"]


def test_load_and_unload_follow_the_restricted_model_repository_group(explicit: Explicit) -> None:
    for action in ("load", "unload"):
        response = explicit.post("other", action, headers={})
        assert response.status_code == 403
        assert response.json()["error"]["message"] == "This API is restricted, expecting header 'admin-key'"
    assert explicit.listed() == ["chat"]  # /v1/models (metadata) is not restricted
    assert requests.get(f"{explicit.base}/v1/models/chat").status_code == 200


def test_without_explicit_mode_load_and_unload_are_400_with_tritons_sentence(openai_server: OpenAIServer) -> None:
    for action in ("load", "unload"):
        response = requests.post(f"http://127.0.0.1:{openai_server.port}/v1/models/chat/{action}")
        assert response.status_code == 400, response.text
        assert _detail(response) == "Model load/unload requires --model-control-mode=explicit"
    listed = requests.get(f"{openai_server.base_url}/models").json()["data"]
    assert "chat" in [m["id"] for m in listed]  # still served
