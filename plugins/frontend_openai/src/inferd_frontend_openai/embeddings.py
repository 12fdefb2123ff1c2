"""``/v1/embeddings``: the body checked field by field, each input embedded by the model, the answer
in OpenAI's shape (as ``vllm serve --runner pooling`` answers it).

The model follows the pooling convention of the vLLM backend: ``text_input`` (BYTES) in,
``embedding`` (FP32, one vector) out; ``pooling_parameters`` (BYTES, JSON: ``dimensions``) and
``return_num_input_tokens`` -> ``num_input_tokens`` when declared. The inputs of one request run
concurrently (the engine batches them).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.api import PICKED, InferdError, InferRequest, InferTensor
from inferd_frontend_openai.errors import bad_request, from_inferd
from inferd_frontend_openai.params import json_type

if TYPE_CHECKING:
    from inferd.api import ModelInfo
    from inferd_frontend_openai.engine import StreamingDataPlane

#: The most inputs one request may carry (vLLM has no limit of its own; each is one engine request).
MAX_INPUTS = 2048
ENCODINGS = ("float", "base64")


def is_embedding_model(info: ModelInfo) -> bool:
    """Whether ``info`` follows the pooling convention: ``text_input`` BYTES in, ``embedding`` FP32 out."""
    spec = info.input_spec("text_input")
    outputs = {t.name: t.datatype for t in info.outputs}
    return spec is not None and spec.datatype == "BYTES" and outputs.get("embedding") == "FP32"


@dataclass
class Embedding:
    """One request, decoded."""

    model: str
    inputs: list[str]
    encoding_format: str = "float"
    dimensions: int | None = None


def decode(body: dict[str, Any]) -> Embedding:
    """The fields of ``/v1/embeddings``; a wrong one is a 400 naming it."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required (a string)", "model")
    value = body.get("input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        if isinstance(texts, list) and texts and all(isinstance(t, (int, list)) for t in texts):
            raise bad_request("'input' as token ids is not supported; send the text", "input")
        raise bad_request(f"'input' must be a string or a non-empty array of strings, got {json_type(value)}", "input")
    if len(texts) > MAX_INPUTS:
        raise bad_request(f"'input' has {len(texts)} items; at most {MAX_INPUTS} per request", "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ENCODINGS:
        raise bad_request(f"'encoding_format' must be one of {', '.join(ENCODINGS)}, got {fmt!r}", "encoding_format")
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise bad_request(f"'dimensions' must be a positive integer, got {dimensions!r}", "dimensions")
    return Embedding(model, texts, fmt, dimensions)


def _request(info: ModelInfo, text: str, parameters: dict[str, Any], request_id: str) -> InferRequest:
    request = InferRequest(info.name, str(info.version), request_id)
    request.context[PICKED] = True  # the catalog picked the version through the model's split: judge it
    request.inputs["text_input"] = _one(info, "text_input", text.encode(), "BYTES")
    if parameters and info.input_spec("pooling_parameters") is not None:
        request.inputs["pooling_parameters"] = _one(
            info, "pooling_parameters", json.dumps(parameters).encode(), "BYTES"
        )
    if info.input_spec("return_num_input_tokens") is not None:
        request.inputs["return_num_input_tokens"] = _one(info, "return_num_input_tokens", True, "BOOL")
    return request


def _one(info: ModelInfo, name: str, value: object, datatype: str) -> InferTensor:
    spec = info.input_spec(name)
    dims = spec.dims if spec is not None else (1,)
    shape = ((1,) if info.batching else ()) + tuple(1 if d == -1 else d for d in dims)
    dtype = np.object_ if datatype == "BYTES" else np.bool_
    return InferTensor(name, datatype, shape, np.array([value], dtype=dtype).reshape(shape))


async def _embed(dataplane: StreamingDataPlane, info: ModelInfo, request: InferRequest) -> tuple[np.ndarray, int]:
    """The vector and the prompt's token count (0 when the model does not say)."""
    vector: np.ndarray | None = None
    tokens = 0
    stream = dataplane.stream(request, info)
    try:
        async for item in stream:
            if isinstance(item, InferdError):
                raise item
            out = item.output("embedding")
            if out is not None:
                vector = np.asarray(out.data, dtype=np.float32).reshape(-1)
            count = item.output("num_input_tokens")
            if count is not None and count.data.size:
                tokens = int(count.data.reshape(-1)[0])
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    if vector is None:
        raise bad_request(f"model '{info.name}' answered no 'embedding' output")
    return vector, tokens


async def run(dataplane: StreamingDataPlane, info: ModelInfo, emb: Embedding, lora: str | None) -> dict[str, Any]:
    """Embed every input of ``emb`` on the model; OpenAI's response object."""
    reply_id = "embd-" + uuid.uuid4().hex
    parameters: dict[str, Any] = {}
    if emb.dimensions is not None:
        parameters["dimensions"] = emb.dimensions
    if lora is not None:
        parameters["lora_name"] = lora
    jobs = [_embed(dataplane, info, _request(info, text, parameters, reply_id)) for text in emb.inputs]
    try:
        results = await asyncio.gather(*jobs)
    except InferdError as exc:
        raise from_inferd(exc) from None
    data = [
        {"index": i, "object": "embedding", "embedding": _encode(vector, emb.encoding_format)}
        for i, (vector, _) in enumerate(results)
    ]
    tokens = sum(n for _, n in results)
    return {
        "id": reply_id,
        "object": "list",
        "created": int(time.time()),
        "model": emb.model,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encode(vector: np.ndarray, fmt: str) -> list[float] | str:
    """``float``: the numbers; ``base64``: the little-endian float32 bytes, base64 (OpenAI's and vLLM's)."""
    if fmt == "base64":
        return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")
    numbers: list[float] = vector.tolist()
    return numbers
