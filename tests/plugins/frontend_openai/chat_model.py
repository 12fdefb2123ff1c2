"""A chat model as Triton users write one by hand: a Python-backend model.py, decoupled, that
tokenizes its prompt and streams text word by word (Triton's vLLM tensor convention), and the
tokenizer it ships with (byte-level BPE trained here, with a chat template)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "alpha beta gamma delta epsilon zeta eta theta iota kappa",
    "you are a helpful assistant; say hello to the user",
    "what is the capital of france? paris is the capital",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
#: What the model says, from word ``seed % 10`` on: its first word is its prompt's token count.
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]

MODEL_PY = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


class TritonPythonModel:
    def initialize(self, args):
        folder = json.loads(args["model_config"])["parameters"]["tokenizer"]["string_value"]
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.generate, args=(request,), daemon=True).start()
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0].decode()
        stream = pb_utils.get_input_tensor_by_name(request, "stream")
        stream = bool(stream.as_numpy().reshape(-1)[0]) if stream is not None else False
        raw = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        params = json.loads(raw.as_numpy().reshape(-1)[0]) if raw is not None else {}
        if "fail" in prompt:
            error = pb_utils.TritonError("the model refuses to fail")
            sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        count = len(self.tokenizer.encode(prompt, add_special_tokens=False).ids)
        start = int(params.get("seed", 0)) % len(WORDS)
        n = int(params.get("max_tokens", 8))
        words = [str(count)] + [WORDS[(start + i) % len(WORDS)] for i in range(n - 1)]
        pieces = [words[0]] + [" " + w for w in words[1:]]
        flag = pb_utils.get_input_tensor_by_name(request, "return_logprobs")
        with_logprobs = flag is not None and bool(flag.as_numpy().reshape(-1)[0])
        steps = [{"7": {"logprob": -0.25, "rank": 1, "decoded_token": p},
                  "8": {"logprob": -1.5, "rank": 2, "decoded_token": "<alt>"}} for p in pieces]
        if not stream:
            pieces, steps = ["".join(pieces)], [steps]
        else:
            steps = [[step] for step in steps]
        for piece, step in zip(pieces, steps):
            if request.is_cancelled():
                error = pb_utils.TritonError("cancelled by the client", pb_utils.TritonError.CANCELLED)
                sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            outs = [pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))]
            if with_logprobs:
                outs.append(pb_utils.Tensor("logprobs", np.array([json.dumps(step).encode()], dtype=np.object_)))
            sender.send(pb_utils.InferenceResponse(outs))
            if "slowly" in prompt:
                time.sleep(0.01)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}{extra_input}
]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }}{extra_output} ]
parameters {{ key: "tokenizer" value {{ string_value: "{tokenizer}" }} }}
"""


def write_tokenizer(folder: Path, template: str | None = CHAT_TEMPLATE) -> Path:
    """Train a byte-level BPE tokenizer on :data:`SENTENCES` and save it (Hugging Face layout)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tokenizer.train_from_iterator(SENTENCES, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    config: dict[str, object] = {"eos_token": "<|end|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


#: The input and output that let the model send token log-probabilities (Triton's vLLM backend's).
LOGPROBS_INPUT = ',\n  { name: "return_logprobs" data_type: TYPE_BOOL dims: [ 1 ] optional: true }'
LOGPROBS_OUTPUT = ',\n  { name: "logprobs" data_type: TYPE_STRING dims: [ -1 ] }'


def write_chat_model(repo: Path, name: str, tokenizer: Path | None = None, template: str | None = CHAT_TEMPLATE,
                     logprobs: bool = False) -> Path:  # fmt: skip
    """The chat model ``name`` in ``repo`` with its tokenizer in ``tokenizer`` (default: its
    version folder); the model reads it from the path its config's ``tokenizer`` parameter names.
    With ``logprobs`` it declares ``return_logprobs`` and ``logprobs``: each piece of text gets
    log-probability -0.25 (rank 1), and a candidate ``<alt>`` -1.5 (rank 2)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    folder = tokenizer or model_dir / "1"
    if not (folder / "tokenizer.json").is_file():
        write_tokenizer(folder, template)
    extra = {"extra_input": LOGPROBS_INPUT if logprobs else "", "extra_output": LOGPROBS_OUTPUT if logprobs else ""}
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(CONFIG.format(name=name, tokenizer=folder, **extra)))
    (model_dir / "1" / "model.py").write_text(MODEL_PY)
    return model_dir


def count(tokenizer: Any, text: str) -> int:
    """How many tokens ``tokenizer`` (a ``tokenizers.Tokenizer``) makes of ``text``."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def expected_text(prompt_tokens: int, max_tokens: int, seed: int = 0) -> str:
    """What the model answers (see MODEL_PY)."""
    return " ".join([str(prompt_tokens)] + [WORDS[(seed + i) % len(WORDS)] for i in range(max_tokens - 1)])
