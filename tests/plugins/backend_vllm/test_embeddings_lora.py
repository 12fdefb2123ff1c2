"""Embeddings, LoRA adapters and per-model vLLM metrics end to end, with the official ``openai`` client.

inferd's ``llm`` (generative, with a LoRA adapter ``sql`` in Triton's vLLM backend layout) is
compared with a real ``vllm serve`` on the same folder (``--lora-modules``), and ``embed``'s vectors
(vLLM's pooling runner) with the same model's computed by transformers, independently of vLLM: the
servers of the conftest's :class:`SideBySide`.
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.testing import ServerProcess
from tests.http_calls import json_call
from tests.lazy import lazy_import
from tests.metrics_text import scrape
from tests.plugins.backend_vllm.conftest import SKIP, SideBySide, VllmServe

openai = lazy_import("openai")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or ""), pytest.mark.timeout(1800)]
TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog"]
PROMPT = "hello world"


@pytest.fixture(scope="module")
def inferd(side_by_side: SideBySide) -> ServerProcess:
    return side_by_side.inferd


@pytest.fixture(scope="module")
def reference(chat_llama: Path) -> dict[str, tuple[np.ndarray, int]]:
    """Each of :data:`TEXTS` -> (its embedding, its number of tokens), as vLLM's pooling runner embeds
    with a causal LM's default pooler: the last token's final hidden state, L2-normalised. Computed
    with transformers, not vLLM (``vllm serve --runner pooling`` on this folder answers the same
    vectors to 1e-7)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_llama)
    model = AutoModel.from_pretrained(chat_llama, dtype=torch.float32).eval()
    out = {}
    for text in TEXTS:
        ids = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            last = model(**ids).last_hidden_state[0, -1]
        out[text] = ((last / last.norm()).numpy(), int(ids["input_ids"].shape[1]))
    return out


@pytest.fixture(scope="module")
def vllm_lora(side_by_side: SideBySide) -> VllmServe:
    """``vllm serve`` of ``llm`` with ``--lora-modules sql=...``."""
    return side_by_side.vllm_llm


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


def inferd_client(server: ServerProcess) -> openai.OpenAI:
    return client(f"http://127.0.0.1:{server.ports['openai']}/v1")


def post(server: ServerProcess, model: str, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return json_call(f"http://{server.http_url}/v2/models/{model}/{route}", "POST", body, timeout=120)


def vllm_samples(server: ServerProcess) -> dict[str, float]:
    """Every ``vllm:*`` sample of one scrape of inferd's ``/metrics``, by name and labels as written."""
    return {name: float(value) for name, value in re.findall(r"^(vllm:\S+) (\S+)$", scrape(server), re.MULTILINE)}


class TestEmbeddings:
    def test_vectors_equal_the_models_float_and_base64(
        self, inferd: ServerProcess, reference: dict[str, tuple[np.ndarray, int]]
    ) -> None:
        ours = inferd_client(inferd)
        got = ours.embeddings.create(model="embed", input=TEXTS, encoding_format="float")
        assert [d.index for d in got.data] == [0, 1]
        assert got.model == "embed"
        assert got.usage.prompt_tokens == sum(reference[t][1] for t in TEXTS) > 0
        for mine, text in zip(got.data, TEXTS, strict=True):
            assert np.allclose(mine.embedding, reference[text][0], atol=1e-5)
        raw = ours.embeddings.create(model="embed", input=TEXTS, encoding_format="base64")
        for item, text in zip(raw.data, TEXTS, strict=True):
            assert isinstance(item.embedding, str)
            decoded = np.frombuffer(base64.b64decode(item.embedding), dtype="<f4")
            assert np.allclose(decoded, reference[text][0], atol=1e-5)
        # The client's default: it asks for base64 and decodes it itself.
        default = ours.embeddings.create(model="embed", input=TEXTS[0])
        assert np.allclose(default.data[0].embedding, reference[TEXTS[0]][0], atol=1e-5)

    def test_dimensions_refused_as_vllm_refuses_them(self, inferd: ServerProcess) -> None:
        # The tiny Llama is no matryoshka model: vLLM refuses another size, in its own words.
        with pytest.raises(openai.BadRequestError, match="(?i)matryoshka"):
            inferd_client(inferd).embeddings.create(model="embed", input=PROMPT, dimensions=16)

    def test_generate_returns_the_same_vector(self, inferd: ServerProcess) -> None:
        want = inferd_client(inferd).embeddings.create(model="embed", input=PROMPT, encoding_format="float")
        status, body = post(inferd, "embed", "generate", {"text_input": PROMPT, "return_num_input_tokens": True})
        assert status == 200, body
        assert np.allclose(body["embedding"], want.data[0].embedding, atol=1e-6)
        assert body["num_input_tokens"] == want.usage.prompt_tokens

    def test_embeddings_of_a_generative_model_is_a_clear_400(self, inferd: ServerProcess) -> None:
        with pytest.raises(openai.BadRequestError, match="model 'llm' does not serve embeddings") as caught:
            inferd_client(inferd).embeddings.create(model="llm", input=PROMPT)
        assert caught.value.body["param"] == "model"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError, match="'embed' is an embedding model"):
            inferd_client(inferd).completions.create(model="embed", prompt=PROMPT, max_tokens=2)


class TestLora:
    def test_adapter_answers_as_vllm_serve_lora_modules(self, inferd: ServerProcess, vllm_lora: VllmServe) -> None:
        ours, theirs = inferd_client(inferd), client(f"{vllm_lora.url}/v1")
        listed = {m.id for m in ours.models.list()}
        assert {"llm", "sql", "embed"} <= listed
        assert {m.id for m in theirs.models.list()} == {"llm", "sql"}
        texts = {}
        for model in ("llm", "sql"):
            want = theirs.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
            got = ours.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
            assert got.model == model
            assert got.choices[0].text == want.choices[0].text, model
            assert got.usage.completion_tokens == want.usage.completion_tokens
            texts[model] = got.choices[0].text
        assert texts["sql"] != texts["llm"]  # the adapter is applied
        assert ours.models.retrieve("sql").id == "sql"

    def test_lora_name_on_generate(self, inferd: ServerProcess) -> None:
        want = inferd_client(inferd).completions.create(model="sql", prompt=PROMPT, max_tokens=8, temperature=0)
        params = json.dumps({"lora_name": "sql", "max_tokens": 8, "temperature": 0})
        status, body = post(inferd, "llm", "generate",
                            {"text_input": PROMPT, "sampling_parameters": params, "exclude_input_in_output": True})  # fmt: skip
        assert status == 200, body
        assert body["text_output"] == want.choices[0].text
        # As a request parameter too (no sampling_parameters tensor).
        status, body = post(inferd, "llm", "generate", {"text_input": PROMPT, "exclude_input_in_output": True,
                            "parameters": {"lora_name": "sql", "max_tokens": 8, "temperature": 0}})  # fmt: skip
        assert status == 200, body
        assert body["text_output"] == want.choices[0].text

    def test_unknown_lora_name_is_a_400_naming_it(self, inferd: ServerProcess) -> None:
        params = json.dumps({"lora_name": "nosuch", "max_tokens": 2})
        status, body = post(inferd, "llm", "generate", {"text_input": PROMPT, "sampling_parameters": params})
        assert status == 400, body
        assert body["error"].startswith("LoRA nosuch is not supported, we currently support ['sql']")
        with pytest.raises(openai.NotFoundError, match="nosuch"):
            inferd_client(inferd).completions.create(model="nosuch", prompt=PROMPT, max_tokens=2)
        status, body = post(inferd, "embed", "generate", {"text_input": PROMPT, "parameters": {"lora_name": "sql"}})
        assert status == 400 and "LoRA feature is not enabled." in body["error"], body


def test_each_vllm_model_reports_its_own_metrics(inferd: ServerProcess) -> None:
    """Two vLLM models in one process: both engines' vllm:* families, each with its model_name
    (before, vLLM's second stat logger unregistered the first's: only the last loaded reported)."""
    ours = inferd_client(inferd)
    ours.completions.create(model="llm", prompt=PROMPT, max_tokens=3, temperature=0)
    ours.embeddings.create(model="embed", input=TEXTS)
    deadline = time.monotonic() + 60
    while True:  # vLLM records its stats as the engine's outputs come in: poll
        samples = vllm_samples(inferd)
        tokens = {
            m: samples.get(f'vllm:prompt_tokens_total{{engine="0",model_name="{m}"}}', 0) for m in ("llm", "embed")
        }
        if all(tokens.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert tokens["llm"] >= 2 and tokens["embed"] >= 2, samples
    for model in ("llm", "embed"):
        assert f'vllm:num_requests_running{{engine="0",model_name="{model}"}}' in samples
