"""The ``redis`` response cache against a real ``redis-server`` and real inferd servers.

Needs the ``redis-server`` binary (Debian package ``redis-server``); skipped without it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferResponse, InferTensor
from inferd.testing import ServerProcess, free_port, write_repository
from tests.python_models import source
from tests.servers import Servers

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None, reason="redis-server is not installed (apt-get install -y redis-server)"
)

CONFIG = """
name: "counted"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "CALLS" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
response_cache { enable: true }
"""
# CALLS counts this instance's executions: a cached response repeats the count it was made with.
MODEL_PY = source("counted")


class RedisServer:
    """``redis-server`` on a free port, with no persistence, its files in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        import redis

        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "redis.log", "ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.workdir), "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((self.workdir / "redis.log").read_text()) from None
                time.sleep(0.05)
        client.close()
        return self

    def client(self):
        import redis

        return redis.Redis(port=self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def call(client, x, *, params=None):
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inp = mod.InferInput("IN", [len(x)], "FP32")
    inp.set_data_from_numpy(np.asarray(x, dtype=np.float32))
    result = client.infer("counted", [inp], parameters=params, request_id="rid")
    return result.as_numpy("OUT"), int(result.as_numpy("CALLS")[0])


def cache_counts(http) -> tuple[int, int, int]:
    s = http.get_inference_statistics("counted")["model_stats"][0]
    return s["inference_stats"]["cache_hit"]["count"], s["inference_stats"]["cache_miss"]["count"], s["execution_count"]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return write_repository(tmp_path_factory.mktemp("models") / "models",
                            {"counted": {"config.pbtxt": CONFIG, "1/model.py": MODEL_PY}})  # fmt: skip


@pytest.fixture(scope="module")
def server(repo, redis_server, serve: Servers) -> ServerProcess:
    return serve(repo, "--cache-config", f"redis,host=127.0.0.1,port={redis_server.port}")


# -- no server ---------------------------------------------------------------------------------------


def test_hooks_import_no_redis():
    code = "import inferd_cache_redis.hooks, sys; assert 'redis' not in sys.modules, 'redis imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_codec_round_trip_is_read_only_and_rejects_foreign_data():
    from inferd_cache_redis.codec import decode, encode

    response = InferResponse("m", "3", "id-not-stored", [
        InferTensor.from_array("F", np.arange(6, dtype=np.float16).reshape(2, 3)),
        InferTensor("S", "BYTES", (2,), np.array([b"ab", b""], dtype=np.object_), {"p": 1}),
        InferTensor.from_array("E", np.zeros((0, 4), np.int64)),
        InferTensor.from_array("B", np.array([True, False])),
    ], {"rp": "x"})  # fmt: skip
    back = decode(encode(response))
    assert (back.model_name, back.model_version, back.id, back.parameters) == ("m", "3", "", {"rp": "x"})
    for want, got in zip(response.outputs, back.outputs, strict=True):
        assert (got.name, got.datatype, got.shape) == (want.name, want.datatype, want.shape)
        assert got.data.dtype == want.data.dtype and not got.data.flags.writeable
        np.testing.assert_array_equal(got.data, want.data)
    assert back.outputs[1].parameters == {"p": 1}
    for junk in (b"", b"GARBAGE-GARBAGE", encode(response)[:-3]):
        with pytest.raises(ValueError, match="^cache entry "):
            decode(junk)


def test_settings_are_checked():
    from inferd_cache_redis.cache import create_redis_cache

    for settings, words in [({"port": "1"}, "needs 'host'"), ({"host": "h"}, "needs 'port'"),
                            ({"host": "h", "port": "x"}, "whole number"), ({"host": "h", "port": "1", "size": "9"},
                            "unknown setting 'size'")]:  # fmt: skip
        with pytest.raises(InvalidArgument, match=words):
            create_redis_cache(settings)


def test_cache_object_against_real_redis(redis_server):
    from inferd_cache_redis.cache import RedisCache, create_redis_cache

    cache = create_redis_cache({"host": "127.0.0.1", "port": str(redis_server.port), "ttl": "60"})
    assert cache.blocking is True
    response = InferResponse("m", "1", "", [InferTensor.from_array("Y", np.arange(3, dtype=np.int32))])
    assert cache.lookup(b"k" * 16) is None
    cache.insert(b"k" * 16, response)
    response.outputs[0].data[:] = 9  # what was stored does not change
    np.testing.assert_array_equal(cache.lookup(b"k" * 16).outputs[0].data, [0, 1, 2])
    assert 0 < redis_server.client().ttl(RedisCache.redis_key(b"k" * 16)) <= 60
    redis_server.client().delete(RedisCache.redis_key(b"k" * 16))
    cache.close()


# -- real servers ------------------------------------------------------------------------------------


def test_identical_requests_hit_through_redis(server, redis_server):
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    out, calls = call(http, [1, 2])
    np.testing.assert_array_equal(out, [2, 4])
    assert calls == 1
    for client in (http, grpc):
        again, calls = call(client, [1, 2])
        np.testing.assert_array_equal(again, out)
        assert calls == 1
    assert cache_counts(http) == (2, 1, 1)
    assert len(redis_server.client().keys("inferd:*")) == 1
    # Other inputs or parameters miss.
    assert call(http, [1, 3])[1] == 2
    out, calls = call(grpc, [1, 2], params={"scale": 3})
    np.testing.assert_array_equal(out, [3, 6])
    assert calls == 3
    assert cache_counts(http) == (2, 3, 3)
    http.close()
    grpc.close()


def test_two_servers_share_one_redis(repo, redis_server, server):
    http = httpclient.InferenceServerClient(server.http_url)
    out, _ = call(http, [7, 8])
    http.close()
    args = ["--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={redis_server.port}"]
    with ServerProcess([repo], args) as other:
        client = httpclient.InferenceServerClient(other.http_url)
        again, _ = call(client, [7, 8])  # answered from the entry the first server stored
        np.testing.assert_array_equal(again, out)
        assert cache_counts(client) == (1, 0, 0)
        client.close()


def test_server_serves_on_while_redis_is_down(repo, tmp_path):
    redis_srv = RedisServer(tmp_path / "redis").start()
    args = ["--cache-config", f"redis,host=127.0.0.1,port={redis_srv.port}"]
    try:
        with ServerProcess([repo], args) as srv:
            http = httpclient.InferenceServerClient(srv.http_url)
            assert call(http, [1])[1] == 1
            assert call(http, [1])[1] == 1  # a hit
            redis_srv.stop()
            assert call(http, [1])[1] == 2  # Redis gone: the model runs, the request succeeds
            assert call(http, [1])[1] == 3
            http.close()
            assert "response cache lookup failed for model 'counted'" in srv.log()
    finally:
        redis_srv.stop()
