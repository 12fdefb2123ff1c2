"""Which instances each ``--workers`` process creates: a config's instances are the server's."""

from __future__ import annotations

import pytest

from inferd import config as cfg
from inferd.lifecycle.builder import instance_specs


def groups(text: str) -> cfg.ModelConfig:
    return cfg.parse_config_text('name: "m"\n' + text, "test")


CPU2 = groups('instance_group [ { name: "m_0" kind: KIND_CPU count: 2 } ]')
CPU3 = groups('instance_group [ { name: "m_0" kind: KIND_CPU count: 3 } ]')
CPU1 = groups('instance_group [ { name: "m_0" kind: KIND_CPU count: 1 } ]')
TWO_GROUPS = groups('instance_group [ { name: "a" kind: KIND_CPU count: 1 }, { name: "b" kind: KIND_CPU count: 3 } ]')
GPUS = groups('instance_group [ { name: "g" kind: KIND_GPU count: 1 gpus: [ 0, 1 ] } ]')


def names(config: cfg.ModelConfig, worker: int = 0, workers: int = 1) -> list[str]:
    return [s.name for s in instance_specs(config, worker, workers)]


def test_one_worker_creates_every_instance_with_tritons_names():
    assert names(CPU3) == ["m_0_0", "m_0_1", "m_0_2"]
    assert names(TWO_GROUPS) == ["a_0", "b_0", "b_1", "b_2"]
    specs = instance_specs(GPUS)
    assert [(s.name, s.kind, s.device_id) for s in specs] == [("g_0", "KIND_GPU", 0), ("g_1", "KIND_GPU", 1)]


@pytest.mark.parametrize(
    ("config", "workers", "expected"),
    [
        (CPU2, 2, [["m_0_0"], ["m_0_1"]]),
        (CPU3, 2, [["m_0_0", "m_0_2"], ["m_0_1"]]),
        (TWO_GROUPS, 2, [["a_0", "b_1"], ["b_0", "b_2"]]),
        (TWO_GROUPS, 3, [["a_0", "b_2"], ["b_0"], ["b_1"]]),
    ],
)
def test_instances_are_dealt_out_among_the_workers(config, workers, expected):
    per_worker = [names(config, w, workers) for w in range(workers)]
    assert per_worker == expected
    everything = names(config)
    assert sorted(n for ns in per_worker for n in ns) == sorted(everything)  # each exactly once


def test_a_worker_left_without_one_still_gets_an_instance():
    assert [names(CPU1, w, 3) for w in range(3)] == [["m_0_0"], ["m_0_0"], ["m_0_0"]]
    assert [names(CPU2, w, 3) for w in range(3)] == [["m_0_0"], ["m_0_1"], ["m_0_0"]]


def test_gpu_instances_stay_on_their_devices():
    per_worker = [instance_specs(GPUS, w, 2) for w in range(2)]
    assert [[(s.name, s.device_id) for s in specs] for specs in per_worker] == [[("g_0", 0)], [("g_1", 1)]]
