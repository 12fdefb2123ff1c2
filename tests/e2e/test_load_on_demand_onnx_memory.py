"""Load on demand under a memory budget with ONNX models (issue 36): evicting an onnxruntime
session gives its memory back (the process's RSS does not grow over loads and evictions), and a
model whose requests grow onnxruntime's CPU arena after its load is counted at the size its
eviction gave back on its next load, so the budget sees what it holds once it serves. With
``enable_mem_arena`` off the arena never holds a request's intermediates and the footprint stays
the initializer's size."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import requests
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import ServerProcess, write_repository

MB = 1 << 20
SIZE = 32  # MiB: each model's initializer, and each request's intermediate in the arena model
MODELS = 5
CONFIG = """
backend: "onnxruntime"
max_batch_size: 0
input [{ name: "MS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "ID" data_type: TYPE_INT64 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
"""
NO_ARENA = 'parameters { key: "enable_mem_arena" value { string_value: "0" } }\n'


def _model(ident: int, intermediate: bool) -> bytes:
    """ID = W[MS] (W: SIZE MiB of float32 ``ident``) or, with ``intermediate``, ID = (W + MS)[MS]:
    each request then computes a SIZE MiB tensor, allocated from the session's arena."""
    w = numpy_helper.from_array(np.full(SIZE * MB // 4, ident, dtype=np.float32), "W")
    nodes = [helper.make_node("Gather", ["T" if intermediate else "W", "MS"], ["G"])]
    if intermediate:
        nodes[:0] = [
            helper.make_node("Cast", ["MS"], ["F"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["W", "F"], ["T"]),
        ]
    nodes.append(helper.make_node("Cast", ["G"], ["ID"], to=TensorProto.INT64))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("MS", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("ID", TensorProto.INT64, [1])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _rss(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


def _footprints(srv: ServerProcess) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    return {m: float(v) for m, v in re.findall(r'^inferd_model_footprint_bytes\{model="(\w+)"\} (\S+)$', text, re.M)}


def _cycle(srv: ServerProcess, rounds: int, shift: int) -> list[int]:
    """Each model once per round, in order; the server's RSS after each answer."""
    assert srv.proc is not None
    client = httpclient.InferenceServerClient(srv.http_url, network_timeout=60)
    seen = []
    for _ in range(rounds):
        for i in range(MODELS):
            x = httpclient.InferInput("MS", [1], "INT32")
            x.set_data_from_numpy(np.array([2], dtype=np.int32))
            assert int(client.infer(f"o{i}", [x]).as_numpy("ID")[0]) == i + shift
            time.sleep(0.1)
            seen.append(_rss(srv.proc.pid))
    return seen


def test_evicting_an_onnx_model_gives_its_memory_back(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "m", {f"o{i}": {"config.pbtxt": CONFIG, "1/model.onnx": _model(i, False)} for i in range(MODELS)}
    )
    budget = int(2.5 * SIZE * MB)  # holds 2
    with ServerProcess([repo], ["--model-load-on-demand=true", f"--model-memory-budget={budget}"]) as srv:
        seen = _cycle(srv, 3, 0)
        footprints = _footprints(srv)
        log = srv.log()
    assert len(re.findall(r"model 'o\d' evicted", log)) >= 3 * MODELS - 2
    # each footprint is the initializer (onnxruntime keeps it resident) and no more
    assert footprints and all(0.9 * SIZE * MB <= f <= 1.25 * SIZE * MB for f in footprints.values()), footprints
    # 13 evictions later the process holds what it held with two models loaded the first time: each
    # eviction gave its model's memory back
    assert max(seen[MODELS:]) <= seen[2] + 8 * MB, [s // MB for s in seen]
    print(
        f"\nRSS after each request (MiB): {[s // MB for s in seen]}; footprints (MiB): {sorted(f / MB for f in footprints.values())}"
    )


@pytest.mark.parametrize("arena", [True, False], ids=["arena", "no-arena"])
def test_an_arena_grown_by_requests_counts_from_the_models_next_load(tmp_path: Path, arena: bool) -> None:
    config = CONFIG + ("" if arena else NO_ARENA)
    repo = write_repository(
        tmp_path / "m", {f"o{i}": {"config.pbtxt": config, "1/model.onnx": _model(i, True)} for i in range(MODELS)}
    )
    budget = int(2.5 * SIZE * MB)
    with ServerProcess([repo], ["--model-load-on-demand=true", f"--model-memory-budget={budget}"]) as srv:
        seen = _cycle(srv, 3, 2)
        footprints = _footprints(srv)
    print(
        f"\nRSS after each request (MiB): {[s // MB for s in seen]}; footprints (MiB): {sorted(f / MB for f in footprints.values())}"
    )
    if arena:  # the initializer + the request's intermediate, kept in the arena
        assert footprints and all(f >= 1.8 * SIZE * MB for f in footprints.values()), footprints
    else:
        assert footprints and all(f <= 1.25 * SIZE * MB for f in footprints.values()), footprints
    # from the second round on, what the budget counts is what the models hold
    assert max(seen[MODELS + 1 :]) <= seen[0] - SIZE * MB + budget + 8 * MB, [s // MB for s in seen]
