"""``--chat-template``: one template for every model that is not a vLLM model's engine, as
``vllm serve --chat-template`` (a file, or the template itself); a model without a template of its
own chats with it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tokenizers import Tokenizer

from inferd.testing import ServerProcess
from tests.lazy import lazy_import

from .chat_model import count, expected_text
from .conftest import write_repo

openai = lazy_import("openai")

#: Not the models' own template (chat_model.CHAT_TEMPLATE): every message's role and content in brackets.
TEMPLATE = "{% for m in messages %}[{{ m['role'] }}: {{ m['content'] }}]\n{% endfor %}{% if add_generation_prompt %}>{% endif %}"
MESSAGES = [{"role": "system", "content": "you are a helpful assistant"}, {"role": "user", "content": "say hello"}]
RENDERED = "[system: you are a helpful assistant]\n[user: say hello]\n>"


@pytest.fixture(scope="module", params=["file", "inline"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, Tokenizer]]:
    root = tmp_path_factory.mktemp("chat_template_flag")
    write_repo(root / "models", root / "tokenizer")
    value = TEMPLATE
    if request.param == "file":
        (root / "template.jinja").write_text(TEMPLATE)
        value = str(root / "template.jinja")
    process = ServerProcess(
        [root / "models"], ["--openai-port", "0", "--openai-address", "127.0.0.1", "--chat-template", value]
    )
    with process:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{process.ports['openai']}/v1", api_key="unused", max_retries=0
        )
        yield client, Tokenizer.from_file(str(root / "models" / "chat" / "1" / "tokenizer.json"))


@pytest.mark.parametrize("model", ["chat", "plain"])  # plain: a tokenizer without a chat template
def test_the_flags_template_renders_every_models_chat(served: tuple[openai.OpenAI, Tokenizer], model: str) -> None:
    client, tokenizer = served
    reply = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=3)  # type: ignore[arg-type]
    prompt_tokens = count(tokenizer, RENDERED)
    assert reply.usage is not None and reply.usage.prompt_tokens == prompt_tokens
    assert reply.choices[0].message.content == expected_text(
        prompt_tokens, 3
    )  # the model's first word: its prompt's count
