"""``--default-max-tokens`` (Triton's OpenAI frontend's flag) on a real ``inferd serve``: a request
that sets neither ``max_tokens`` nor ``max_completion_tokens`` gets it. The chat model says
``max_tokens`` words (8 when it is given none), so the flag is seen in the answer's words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.lazy import lazy_import

from .chat_model import write_chat_model

openai = lazy_import("openai")

FLAG = 5


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    repo = tmp_path_factory.mktemp("default-max-tokens") / "models"
    write_chat_model(repo, "chat")
    args = ["--openai-port", "0", "--openai-address", "127.0.0.1", "--default-max-tokens", str(FLAG)]
    with ServerProcess([repo], args) as process:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{process.ports['openai']}/v1", api_key="unused")


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_without_max_tokens_gets_the_flag(client: openai.OpenAI, stream: bool) -> None:
    messages = [{"role": "user", "content": "hello"}]
    if stream:
        chunks = client.chat.completions.create(model="chat", messages=messages, stream=True)  # type: ignore[arg-type]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        completion = "".join(
            c.choices[0].text for c in client.completions.create(model="chat", prompt="hello", stream=True)
        )
    else:
        text = client.chat.completions.create(model="chat", messages=messages).choices[0].message.content or ""  # type: ignore[arg-type]
        completion = client.completions.create(model="chat", prompt="hello").choices[0].text
    assert len(text.split()) == len(completion.split()) == FLAG


def test_max_tokens_and_max_completion_tokens_win_over_the_flag(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "hello"}]
    reply = client.chat.completions.create(model="chat", messages=messages, max_completion_tokens=3)  # type: ignore[arg-type]
    assert len((reply.choices[0].message.content or "").split()) == 3
    assert len(client.completions.create(model="chat", prompt="hello", max_tokens=2).choices[0].text.split()) == 2


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_flag_that_is_no_positive_integer_fails_the_start(tmp_path: Path, value: str) -> None:
    repo = tmp_path / "models"
    write_chat_model(repo, "chat")
    process = ServerProcess([repo], ["--openai-port", "0", "--default-max-tokens", value])
    with pytest.raises(RuntimeError) as failed:
        process.start(timeout=60)
    process.stop()
    assert "--default-max-tokens" in str(failed.value)
