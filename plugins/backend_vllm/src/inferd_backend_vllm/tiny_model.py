"""A tiny random-weight Llama with a byte-level BPE tokenizer, built offline (tests, benchmarks).

Needs ``transformers`` and ``tokenizers`` (both come with vLLM); nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "inference servers answer requests with tensors",
    "a tiny model says random things but says them fast",
    "hello world, this is a test of the tokenizer",
] * 8


def build_tiny_llama(directory: Path, vocab_size: int = 512, hidden: int = 128, seed: int = 0) -> Path:
    """Write a 2-layer Llama (random weights, head size 64: vLLM's CPU attention has no kernel for
    small heads) and its tokenizer to ``directory``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).float().save_pretrained(directory)  # type: ignore[no-untyped-call]
    return directory


def write_vllm_repository(root: Path, model_dir: Path, name: str = "llm", **engine_args: object) -> Path:
    """A model repository ``root/<name>/1/model.json`` for the vLLM backend (no config.pbtxt)."""
    args = {"model": str(model_dir), "dtype": "float32", "max_model_len": 256, "enforce_eager": True, **engine_args}
    version = root / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.json").write_text(json.dumps(args))
    return root


def main(argv: list[str] | None = None) -> int:
    """``python -m inferd_backend_vllm.tiny_model DIR``: build the tiny Llama into ``DIR``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m inferd_backend_vllm.tiny_model",
        description=(
            "Build a tiny random-weight Llama (2 layers, 512-token vocabulary) and its tokenizer into "
            "DIR, offline, to try the vLLM backend: it answers fast and says random things."
        ),
    )
    parser.add_argument("directory", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    print(build_tiny_llama(args.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
