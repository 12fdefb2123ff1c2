"""The response cache: request keys, the built-in ``local`` cache, and real servers with it.

Statistics are asserted as Triton 2.51 reports them for the same sequence of requests (checked
with the reference Triton and ``--cache-config local,size=1048576``): a hit counts a success and a
cache hit, with no inference, execution or compute time; a miss counts a cache miss.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.caches.local import LocalCache, create_local_cache, entry_size
from inferd.contracts.errors import InvalidArgument, StartupError
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.engine.response_cache import request_key
from inferd.host.plugins import PluginHost
from inferd.host.serve_command import build_parser, options_from_args
from inferd.host.server import Server, ServerOptions
from inferd.testing import ServerProcess, asgi_client, write_repository
from tests.python_models import source
from tests.servers import Servers

COUNTED_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "CALLS" data_type: TYPE_INT64 dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
"""
# CALLS counts this instance's executions: a cached response repeats the count it was made with.
COUNTED_PY = source("counted")
BATCHED_CONFIG = """
name: "batched"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "CALLS" data_type: TYPE_INT64 dims: [ 1 ] }
]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
response_cache { enable: true }
"""
BATCHED_PY = source("response_cache_batched")
TEXT_CONFIG = """
name: "text"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "CALLS" data_type: TYPE_INT64 dims: [ 1 ] }
]
response_cache { enable: true }
"""
TEXT_PY = source("response_cache_text")
ENABLE = "response_cache { enable: true }"
# A top-level ensemble with the cache on, over a model without it (Triton caches top-level
# ensemble requests since 23.x).
ENSEMBLE_CONFIG = """
name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "N" data_type: TYPE_INT64 dims: [ 1 ] }
]
ensemble_scheduling {
  step [ {
    model_name: "plain"
    model_version: -1
    input_map { key: "IN" value: "X" }
    output_map [ { key: "OUT" value: "Y" }, { key: "CALLS" value: "N" } ]
  } ]
}
response_cache { enable: true }
"""


def counted(name: str, cached: bool = True) -> dict[str, str]:
    return {
        "config.pbtxt": COUNTED_CONFIG.format(name=name, extra=ENABLE if cached else ""),
        "1/model.py": COUNTED_PY,
    }


def call(client, model: str, x, *, outputs=None, params=None, binary=True, request_id="rid"):
    """One inference with tritonclient (HTTP or gRPC); returns outputs by name and the response id."""
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = mod.InferInput("IN", [len(x)], "FP32")
    if mod is httpclient:
        inp.set_data_from_numpy(np.asarray(x, dtype=np.float32), binary_data=binary)
    else:
        inp.set_data_from_numpy(np.asarray(x, dtype=np.float32))
    outs = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
    result = client.infer(model, [inp], outputs=outs, parameters=params, request_id=request_id)
    resp = result.get_response()
    names = [o["name"] for o in resp["outputs"]] if mod is httpclient else [o.name for o in resp.outputs]
    rid = resp.get("id", "") if mod is httpclient else resp.id
    return {n: result.as_numpy(n) for n in names}, rid


def cache_stats(client, model: str) -> dict:
    """The model's statistics entry; gRPC's JSON (uint64 as strings, zeros left out) made like HTTP's."""
    if isinstance(client, httpclient.InferenceServerClient):
        return client.get_inference_statistics(model)["model_stats"][0]
    entry = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    entry["inference_count"] = int(entry.get("inference_count", 0))
    entry["execution_count"] = int(entry.get("execution_count", 0))
    for v in entry["inference_stats"].values():
        v["count"] = int(v.get("count", 0))
        v["ns"] = int(v.get("ns", 0))
    return entry


def counts(entry: dict) -> dict[str, int]:
    s = entry["inference_stats"]
    return {
        "success": s["success"]["count"],
        "hit": s["cache_hit"]["count"],
        "miss": s["cache_miss"]["count"],
        "compute": s["compute_infer"]["count"],
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
    }


# -- request keys ----------------------------------------------------------------------------------


def _request(**inputs: np.ndarray) -> InferRequest:
    req = InferRequest("m", id="a")
    for name, arr in inputs.items():
        req.inputs[name] = InferTensor.from_array(name, arr)
    return req


def test_key_depends_on_model_inputs_outputs_and_parameters():
    base = request_key("m", 1, _request(A=np.arange(4, dtype=np.float32), B=np.ones(2, np.int32)))
    same = _request(B=np.ones(2, np.int32), A=np.arange(4, dtype=np.float32))  # other insertion order
    same.id = "another id"
    same.parameters = {"binary_data_output": True, "priority": 1}  # transport/scheduling only
    assert request_key("m", 1, same) == base and len(base) == 16
    assert request_key("m", 2, same) != base
    assert request_key("n", 1, same) != base
    different = [
        _request(A=np.arange(4, dtype=np.float32) + 1, B=np.ones(2, np.int32)),  # bytes
        _request(A=np.arange(4, dtype=np.float32).reshape(2, 2), B=np.ones(2, np.int32)),  # shape
        _request(A=np.arange(4, dtype=np.int32), B=np.ones(2, np.int32)),  # datatype
        _request(C=np.arange(4, dtype=np.float32), B=np.ones(2, np.int32)),  # name
        _request(A=np.arange(4, dtype=np.float32)),  # one input fewer
    ]
    keys = {request_key("m", 1, r) for r in different}
    assert base not in keys and len(keys) == len(different)
    with_param = _request(A=np.arange(4, dtype=np.float32), B=np.ones(2, np.int32))
    with_param.parameters = {"scale": 3}
    assert request_key("m", 1, with_param) != base
    with_param.parameters = {"scale": "3"}  # same text, other type
    other_type = request_key("m", 1, with_param)
    with_param.parameters = {"scale": 3}
    assert other_type != request_key("m", 1, with_param)
    some_outputs = _request(A=np.arange(4, dtype=np.float32), B=np.ones(2, np.int32))
    some_outputs.outputs = [RequestedOutput("Y", {"binary_data": True})]
    key_y = request_key("m", 1, some_outputs)
    assert key_y != base
    some_outputs.outputs = [RequestedOutput("Y", {"binary_data": False})]
    assert request_key("m", 1, some_outputs) == key_y  # encoding only


def test_key_hashes_bytes_and_non_contiguous_inputs():
    words = np.array([b"ab", b"c"], dtype=np.object_)
    assert request_key("m", 1, _request(T=words)) != request_key(
        "m", 1, _request(T=np.array([b"a", b"bc"], dtype=object))
    )
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base.T  # not C-contiguous: hashed in logical order
    assert request_key("m", 1, _request(X=view)) == request_key("m", 1, _request(X=np.ascontiguousarray(view)))
    empty = request_key("m", 1, _request(X=np.zeros((0, 3), np.float32)))
    assert empty != request_key("m", 1, _request(X=np.zeros((3, 0), np.float32)))


# -- the local cache -------------------------------------------------------------------------------


def _response(n: int, fill: float = 1.0) -> InferResponse:
    return InferResponse("m", "1", "r", [InferTensor.from_array("Y", np.full(n, fill, np.float32))])


def test_local_cache_stores_read_only_copies():
    cache = LocalCache(1 << 20)
    original = _response(4)
    cache.insert(b"k", original)
    original.outputs[0].data[:] = 7  # the caller keeps using its arrays
    original.outputs[0].name = "renamed"
    got = cache.lookup(b"k")
    assert got is not None and got.outputs[0].name == "Y"
    np.testing.assert_array_equal(got.outputs[0].data, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="read-only"):
        got.outputs[0].data[0] = 3
    assert cache.lookup(b"missing") is None


def test_local_cache_evicts_least_recently_used_and_skips_oversized():
    one = entry_size(b"a", _response(100))
    cache = LocalCache(2 * one + 10)
    cache.insert(b"a", _response(100, 1))
    cache.insert(b"b", _response(100, 2))
    assert cache.lookup(b"a") is not None  # a becomes the most recently used
    cache.insert(b"c", _response(100, 3))  # evicts b
    assert cache.lookup(b"b") is None and cache.lookup(b"a") is not None and cache.lookup(b"c") is not None
    cache.insert(b"huge", _response(10_000))  # bigger than the whole cache: not stored, evicts nothing
    assert cache.lookup(b"huge") is None and len(cache) == 2 and cache.used <= cache.capacity
    cache.insert(b"a", _response(100, 9))  # replacing an entry keeps the byte count right
    assert cache.used == 2 * one and cache.lookup(b"a").outputs[0].data[0] == 9


def test_local_cache_counts_bytes_elements():
    words = InferTensor.from_array("T", np.array([b"x" * 1000, b"y" * 10], dtype=np.object_))
    small = InferTensor.from_array("T", np.array([b"x", b"y"], dtype=np.object_))
    big = entry_size(b"k", InferResponse("m", "1", "", [words]))
    assert big - entry_size(b"k", InferResponse("m", "1", "", [small])) == 1008


def test_local_cache_is_thread_safe():
    cache = LocalCache(50 * entry_size(b"0000", _response(8)))

    def worker(seed: int) -> None:
        for i in range(300):
            key = str((seed * 7 + i) % 120).encode().rjust(4, b"0")
            if cache.lookup(key) is None:
                cache.insert(key, _response(8, float(i)))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0 < len(cache) <= 50 and cache.used <= cache.capacity


def test_local_cache_settings():
    assert create_local_cache({"size": "4096"}).capacity == 4096
    for settings, words in [({}, "needs a size"), ({"size": "big"}, "whole number"), ({"size": "0"}, "positive"),
                            ({"size": "10", "sise": "1"}, "unknown setting 'sise'")]:  # fmt: skip
        with pytest.raises(InvalidArgument, match=words):
            create_local_cache(settings)


# -- command line and server wiring ----------------------------------------------------------------


def _options(*argv: str) -> ServerOptions:
    host = PluginHost(load_entrypoints=False)
    return options_from_args(build_parser(host).parse_args(["serve", "--model-repository", "/tmp", *argv]))


def test_cache_config_flags_parse_triton_spelling():
    opts = _options("--cache-config", "redis,host=h", "--cache-config=redis,port=6379",
                    "--cache-config", "redis,password=pa,ss", "--cache-directory", "/opt/caches")  # fmt: skip
    # Triton's form: one setting per flag, the value is everything after '=' (commas included).
    assert opts.cache_config == {"redis": {"host": "h", "port": "6379", "password": "pa,ss"}}
    # inferd's shorthand: several settings in one flag when every part is a setting=value pair.
    assert _options("--cache-config", "redis,host=h,port=1,ttl=5").cache_config == {
        "redis": {"host": "h", "port": "1", "ttl": "5"}
    }
    assert "cache_directory" not in opts.extra and "cache_config" not in opts.extra
    assert _options("--response-cache-byte-size", "2048").cache_config == {"local": {"size": "2048"}}
    assert _options().cache_config == {}
    for bad in ("local", "local,size", ",size=1", "local,=1"):
        with pytest.raises(SystemExit):
            _options("--cache-config", bad)


def test_server_builds_one_named_cache(tmp_path):
    host = PluginHost(load_entrypoints=False)
    server = Server(ServerOptions([tmp_path], cache_config={"local": {"size": "1000"}}), host=host)
    assert isinstance(server.cache, LocalCache)
    for config, words in [({"nope": {"size": "1"}}, "installed: local"), ({"local": {}}, "needs a size"),
                          ({"local": {"size": "1"}, "other": {"a": "b"}}, "one response cache")]:  # fmt: skip
        with pytest.raises(StartupError, match=words):  # before any model loads
            Server(ServerOptions([tmp_path], cache_config=config), host=host)


# -- a real server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "counted": counted("counted"),
        "plain": counted("plain", cached=False),
        "batched": {"config.pbtxt": BATCHED_CONFIG, "1/model.py": BATCHED_PY},
        "text": {"config.pbtxt": TEXT_CONFIG, "1/model.py": TEXT_PY},
        "ens": {"config.pbtxt": ENSEMBLE_CONFIG},
    }
    return serve(repo, "--cache-config", "local,size=1048576")


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def test_identical_requests_hit_over_http_and_grpc(http, grpc):
    first, rid = call(http, "counted", [1, 2], request_id="first")
    assert rid == "first" and first["CALLS"][0] == 1
    np.testing.assert_array_equal(first["OUT"], [2, 4])
    # The same request in JSON, in binary, and over gRPC: one entry, the model ran once.
    for client, binary, rid_sent in [(http, True, "second"), (http, False, "third"), (grpc, True, "fourth")]:
        again, rid = call(client, "counted", [1, 2], binary=binary, request_id=rid_sent)
        assert rid == rid_sent  # the cached response answers under this request's id
        np.testing.assert_array_equal(again["OUT"], first["OUT"])
        assert again["CALLS"][0] == 1
    assert counts(cache_stats(http, "counted")) == {
        "success": 4, "hit": 3, "miss": 1, "compute": 1, "inference_count": 1, "execution_count": 1,
    }  # fmt: skip
    entry = cache_stats(grpc, "counted")
    assert entry["inference_stats"]["cache_hit"]["count"] == 3 and entry["inference_stats"]["cache_hit"]["ns"] > 0
    assert entry["inference_stats"]["cache_miss"]["count"] == 1 and entry["inference_stats"]["cache_miss"]["ns"] > 0


def test_different_inputs_outputs_or_parameters_miss(http, grpc):
    before = counts(cache_stats(http, "counted"))
    out, _ = call(http, "counted", [5, 6])
    np.testing.assert_array_equal(out["OUT"], [10, 12])
    calls = out["CALLS"][0]
    out, _ = call(grpc, "counted", [5, 6], params={"scale": 3})  # a parameter the model reads
    np.testing.assert_array_equal(out["OUT"], [15, 18])
    assert out["CALLS"][0] == calls + 1
    out, _ = call(http, "counted", [5, 6], outputs=["OUT"])  # another set of outputs
    assert set(out) == {"OUT"}
    out, _ = call(http, "counted", [5, 6], outputs=["OUT"])
    assert set(out) == {"OUT"}
    out, _ = call(grpc, "counted", [5, 6], params={"scale": 3})
    np.testing.assert_array_equal(out["OUT"], [15, 18])
    assert out["CALLS"][0] == calls + 1
    after = counts(cache_stats(http, "counted"))
    assert after["miss"] - before["miss"] == 3 and after["hit"] - before["hit"] == 2
    assert after["execution_count"] - before["execution_count"] == 3


def test_large_inputs_are_hashed_and_cached(http, grpc):
    x = np.arange(100_000, dtype=np.float32)  # 400 kB: hashed off the event loop
    first, _ = call(http, "counted", x)
    again, _ = call(grpc, "counted", x)
    np.testing.assert_array_equal(again["OUT"], x * 2)
    assert again["CALLS"][0] == first["CALLS"][0]
    x[-1] += 1
    assert call(http, "counted", x)[0]["CALLS"][0] == first["CALLS"][0] + 1


def test_model_without_response_cache_is_never_cached(http):
    before = counts(cache_stats(http, "plain"))["execution_count"]
    seen = [call(http, "plain", [1, 2])[0]["CALLS"][0] for _ in range(3)]
    assert seen == [seen[0], seen[0] + 1, seen[0] + 2]
    stats = counts(cache_stats(http, "plain"))
    assert stats["hit"] == 0 and stats["miss"] == 0 and stats["execution_count"] == before + 3


def test_dynamic_batching_model_is_cached(http, grpc):
    def batched(client):
        mod = httpclient if client is http else grpcclient
        inp = mod.InferInput("IN", [1, 2], "FP32")
        inp.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
        result = client.infer("batched", [inp])
        return result.as_numpy("OUT"), result.as_numpy("CALLS")

    out1, calls1 = batched(http)
    out2, calls2 = batched(grpc)
    np.testing.assert_array_equal(out1, [[2, 3]])
    np.testing.assert_array_equal(out2, out1)
    assert calls1[0][0] == calls2[0][0] == 1
    stats = counts(cache_stats(http, "batched"))
    assert stats["hit"] == 1 and stats["miss"] == 1 and stats["execution_count"] == 1


def test_bytes_tensors_are_cached(http):
    def text(words):
        inp = httpclient.InferInput("TEXT", [len(words)], "BYTES")
        inp.set_data_from_numpy(np.array(words, dtype=np.object_))
        result = http.infer("text", [inp])
        return result.as_numpy("UPPER").tolist(), int(result.as_numpy("CALLS")[0])

    assert text([b"ab", b"c"]) == ([b"AB", b"C"], 1)
    assert text([b"ab", b"c"]) == ([b"AB", b"C"], 1)
    assert text([b"a", b"bc"]) == ([b"A", b"BC"], 2)
    assert counts(cache_stats(http, "text"))["hit"] == 1


def test_top_level_ensemble_is_cached(http, grpc):
    def ens(client):
        mod = httpclient if client is http else grpcclient
        inp = mod.InferInput("X", [3], "FP32")
        inp.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
        result = client.infer("ens", [inp])
        return result.as_numpy("Y").tolist(), int(result.as_numpy("N")[0])

    before = counts(cache_stats(http, "plain"))["execution_count"]
    first = ens(http)
    assert first[0] == [2, 4, 6]
    assert ens(grpc) == first and ens(http) == first
    assert counts(cache_stats(http, "plain"))["execution_count"] == before + 1
    stats = counts(cache_stats(http, "ens"))
    assert stats["hit"] == 2 and stats["miss"] == 1


def test_failed_requests_are_not_cached(http):
    before = counts(cache_stats(http, "counted"))
    messages = []
    for _ in range(2):
        with pytest.raises(Exception, match="negative input") as info:
            call(http, "counted", [-1, 2])
        messages.append(str(info.value))
    assert messages[0] != messages[1]  # the model ran both times
    after = counts(cache_stats(http, "counted"))
    assert after["miss"] == before["miss"] and after["hit"] == before["hit"]


# -- eviction and a server without a cache ---------------------------------------------------------


def test_lru_eviction_in_a_tiny_cache(tmp_path):
    repo = write_repository(tmp_path / "models", {"counted": counted("counted")})
    a, b, c = (np.full(1000, v, np.float32) for v in (1, 2, 3))
    big = np.full(3000, 4, np.float32)  # 12 kB: larger than the whole cache, never stored

    async def scenario() -> tuple[list[int], dict]:
        # Each response carries 1000 floats (4 kB of OUT): two fit in 10 kB, three do not.
        async with asgi_client([repo], cache_config={"local": {"size": "10000"}}) as (client, _):

            async def calls(x: np.ndarray) -> int:
                body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [len(x)], "data": x.tolist()}]}
                reply = await client.post("/v2/models/counted/infer", json=body)
                assert reply.status_code == 200, reply.text
                return int(next(o["data"][0] for o in reply.json()["outputs"] if o["name"] == "CALLS"))

            seq = [await calls(x) for x in (a, b, a, c, a, b, big, big, a, b)]
            stats = (await client.get("/v2/models/counted/stats")).json()["model_stats"][0]
            return seq, stats

    seq, stats = asyncio.run(scenario())
    # a, b miss; a hits; c evicts b; a hits; b misses and evicts c; big misses twice; a and b hit
    assert seq == [1, 2, 1, 3, 1, 4, 5, 6, 1, 4]
    stats = counts(stats)
    assert stats["hit"] == 4 and stats["miss"] == 6 and stats["execution_count"] == 6


def test_model_enabling_the_cache_without_a_server_cache_warns(tmp_path):
    repo = write_repository(tmp_path / "models", {"counted": counted("counted")})
    with ServerProcess([repo]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert [int(call(client, "counted", [1])[0]["CALLS"][0]) for _ in range(2)] == [1, 2]
        client.close()
        assert "enables response_cache, but the server has no cache" in srv.log()
