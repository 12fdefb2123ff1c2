"""One real ``inferd serve`` for these tests: the chat model (tokenizer in its version folder),
the same model with its tokenizer in a ``tokenizer`` folder, one without a chat template, and an
ordinary (not decoupled) model the OpenAI API does not serve."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from inferd.testing import ServerProcess

from .chat_model import write_chat_model

ADD_ONE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy() + 1)]) for r in requests]
"""


@dataclass
class OpenAIServer:
    process: ServerProcess
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self, model: str) -> dict[str, object]:
        """The model's Triton statistics (KServe HTTP)."""
        url = f"http://{self.process.http_url}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())["model_stats"][0]


def write_repo(repo: Path, elsewhere: Path) -> None:
    """``chat`` (tokenizer in its version folder), ``chat_folder`` (in a ``tokenizer`` folder),
    ``plain`` (no chat template), ``bare`` (tokenizer outside the model: only the model knows it),
    ``chat_logprobs`` (sends token log-probabilities) and ``add_one`` (no text model)."""
    write_chat_model(repo, "chat")
    write_chat_model(repo, "chat_folder", tokenizer=repo / "chat_folder" / "tokenizer")
    write_chat_model(repo, "plain", template=None)
    write_chat_model(repo, "bare", tokenizer=elsewhere)
    write_chat_model(repo, "chat_logprobs", logprobs=True)
    add_one = repo / "add_one"
    (add_one / "1").mkdir(parents=True)
    (add_one / "1" / "model.py").write_text(textwrap.dedent(ADD_ONE))
    (add_one / "config.pbtxt").write_text(
        textwrap.dedent("""
        name: "add_one"
        backend: "python"
        max_batch_size: 0
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """)
    )


@pytest.fixture(scope="package")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIServer]:
    root = tmp_path_factory.mktemp("openai")
    repo = root / "models"
    write_repo(repo, root / "tokenizer")
    process = ServerProcess([repo], ["--openai-port", "0", "--openai-address", "127.0.0.1"])
    with process:
        yield OpenAIServer(process, process.ports["openai"])
