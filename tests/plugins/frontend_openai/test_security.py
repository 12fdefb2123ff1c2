"""The OpenAI port under the HTTP port's security settings, through the official ``openai``
client over TLS (``--http-ssl-*``, certificates from trustme): API keys and tenants
(``--auth-config``), ``--http-restricted-api``, and ``--http-max-input-size``."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from inferd.auth import digest
from inferd.testing import write_repository
from tests.e2e import models
from tests.e2e.tls_server import TlsServer
from tests.lazy import lazy_import

from .chat_model import write_chat_model

trustme = pytest.importorskip("trustme")

openai = lazy_import("openai")


CONFIG = f"""
tenants:
  alice:
    keys: [{digest("alice-key")}]
    models: [chat]
  bob:
    keys: [{digest("bob-key")}]
    models: [plain]
  ops:
    keys: [{digest("ops-key")}]
    apis: [statistics]
  limited:
    keys: [{digest("limited-key")}]
    models: [chat]
    rate: 0.01
    burst: 1
  single:
    keys: [{digest("single-key")}]
    models: [chat]
    concurrency: 1
"""
LIMIT = 65536
#: ``--http-restricted-api``: the metadata group (``/v1/models``) needs this header too.
RESTRICTED = {"openai-admin": "s3cret"}


class Port:
    """The OpenAI port: its address and the CA that signed its certificate."""

    def __init__(self, port: int, ca: str) -> None:
        self.base_url = f"https://localhost:{port}/v1"
        self.ca = ca

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)

    def client(self, key: str, restricted: bool = True) -> openai.OpenAI:
        """The official client with ``key``, trusting the test CA only."""
        headers = RESTRICTED if restricted else {}
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, default_headers=headers,
                             http_client=httpx.Client(verify=self.context(), timeout=30))  # fmt: skip


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Port]:
    root = tmp_path_factory.mktemp("openai-security")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(root / "ca.pem")
    leaf = ca.issue_cert("localhost")
    (root / "server.pem").write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(root / "server.key")
    repo = write_repository(root / "models", {"add_sub": models.add_sub()})
    write_chat_model(repo, "chat")
    write_chat_model(repo, "plain", template=None)
    (root / "auth.yaml").write_text(CONFIG)
    args = ["--openai-port", "0", "--openai-address", "127.0.0.1", f"--auth-config={root / 'auth.yaml'}",
            "--http-ssl-certfile", str(root / "server.pem"), "--http-ssl-keyfile", str(root / "server.key"),
            f"--http-max-input-size={LIMIT}", "--http-restricted-api=metadata:openai-admin=s3cret"]  # fmt: skip
    proc = TlsServer([repo], args)
    proc.ca = str(root / "ca.pem")
    with proc:  # __enter__ starts it (proc.start() here started a second server, never stopped)
        yield Port(proc.ports["openai"], proc.ca)


def error(exc: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, object]:
    body = exc.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def complete(client: openai.OpenAI, model: str = "chat", prompt: str = "hello") -> str:
    return client.completions.create(model=model, prompt=prompt, max_tokens=2).choices[0].text


def test_a_tenant_is_served_over_tls_and_sees_only_its_models(port: Port) -> None:
    alice = port.client("alice-key")
    assert complete(alice)
    assert [m.id for m in alice.models.list()] == ["chat"]
    assert [m.id for m in port.client("bob-key").models.list()] == ["plain"]
    assert alice.models.retrieve("chat").id == "chat"


def test_a_request_without_a_valid_key_is_401(port: Port) -> None:
    with pytest.raises(openai.AuthenticationError) as exc:
        complete(port.client("wrong-key"))
    assert exc.value.response.headers["www-authenticate"] == "Bearer"
    assert error(exc) == {"message": "unknown API key", "type": "invalid_request_error", "param": None,
                          "code": "invalid_api_key"}  # fmt: skip
    for headers in ({}, {"authorization": "Basic YWxpY2U6a2V5"}):  # no key; not a bearer key
        response = httpx.get(f"{port.base_url}/models", headers={**RESTRICTED, **headers}, verify=port.context())
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert response.json()["error"]["message"] == "the Authorization header must be 'Bearer <key>'"


def test_another_tenants_model_answers_as_an_unknown_one(port: Port) -> None:
    alice = port.client("alice-key")
    answers = []
    for model in ("plain", "nope"):
        with pytest.raises(openai.NotFoundError) as exc:
            complete(alice, model)
        with pytest.raises(openai.NotFoundError) as meta:
            alice.models.retrieve(model)
        answers.append((error(exc), error(meta)))
    unknown = {"message": "The model `nope` does not exist.", "type": "invalid_request_error", "param": "model",
               "code": "model_not_found"}  # fmt: skip
    assert answers[1] == (unknown, unknown)
    hidden = {**unknown, "message": "The model `plain` does not exist."}
    assert answers[0] == (hidden, hidden)
    # "did you mean" only among the tenant's models: bob's "plain" is never suggested to alice
    for model, hint in (("plai", ""), ("chta", " Did you mean `chat`?")):
        with pytest.raises(openai.NotFoundError) as exc:
            complete(alice, model)
        assert error(exc)["message"] == f"The model `{model}` does not exist.{hint}"


def test_outside_the_tenants_api_groups_or_a_restricted_group_is_403(port: Port) -> None:
    ops = port.client("ops-key")
    with pytest.raises(openai.PermissionDeniedError) as exc:
        complete(ops)
    assert error(exc)["message"] == "tenant 'ops' may not use the inference API"
    with pytest.raises(openai.PermissionDeniedError) as exc:
        ops.models.list()
    assert error(exc)["message"] == "tenant 'ops' may not use the metadata API"
    with pytest.raises(openai.PermissionDeniedError) as exc:
        port.client("alice-key", restricted=False).models.list()
    assert error(exc)["message"] == "This API is restricted, expecting header 'openai-admin'"
    assert complete(port.client("alice-key", restricted=False))  # inference is not restricted


def test_over_the_tenants_rate_is_429_with_retry_after(port: Port) -> None:
    limited = port.client("limited-key")
    assert complete(limited)  # the burst of 1
    with pytest.raises(openai.RateLimitError) as exc:
        complete(limited)
    assert int(exc.value.response.headers["retry-after"]) >= 1
    assert error(exc)["code"] == "rate_limit_exceeded"


def test_a_stream_holds_the_tenants_slot_until_it_ends(port: Port) -> None:
    single = port.client("single-key")
    # "slowly": the model waits 10 ms after each token, so the stream is open for ~0.5 s
    stream = single.completions.create(model="chat", prompt="say it slowly", max_tokens=50, stream=True)
    first = next(iter(stream))
    with pytest.raises(openai.RateLimitError) as exc:
        complete(single)
    assert exc.value.response.headers["retry-after"] == "1"
    assert error(exc)["message"].startswith("tenant 'single' already has 1 requests in flight")
    text = first.choices[0].text + "".join(chunk.choices[0].text for chunk in stream)
    assert len(text.split()) == 50
    deadline = time.monotonic() + 5  # the slot is given back once the last chunk is sent
    while True:
        try:
            assert complete(single)
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline


def test_a_body_over_the_limit_is_refused_and_the_server_stays_healthy(port: Port) -> None:
    alice = port.client("alice-key")
    with pytest.raises(openai.BadRequestError) as exc:
        complete(alice, prompt="x" * LIMIT)
    message = error(exc)["message"]
    assert isinstance(message, str) and message.startswith("Request body size of ")
    assert f"exceeds the maximum allowed value of {LIMIT} bytes" in message
    chunked = httpx.post(f"{port.base_url}/completions", content=iter([b"{" + b" " * LIMIT]), verify=port.context(),
                         headers={"authorization": "Bearer alice-key"})  # fmt: skip
    assert chunked.status_code == 400
    assert "(more than 65536 bytes, chunked)" in chunked.json()["error"]["message"]
    assert complete(alice)


def test_clear_text_is_refused_on_the_openai_port(port: Port) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(port.base_url.replace("https", "http") + "/models", timeout=5)
    assert complete(port.client("alice-key"))
