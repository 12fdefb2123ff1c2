"""``--workers auto`` (``inferd.workers.auto``): a worker per usable core, one where a model must
not be loaded once per process, and the reason said."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.host.plugins import PluginHost
from inferd.host.serve_command import build_parser
from inferd.testing import write_repository
from inferd.workers import auto

IDENTITY = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{extra}
"""
SEQUENCE = "sequence_batching { max_sequence_idle_microseconds: 1000000 }"
GPU = "instance_group [ { kind: KIND_GPU count: 1 } ]"


@pytest.fixture(scope="module")
def backends():
    return PluginHost().backends


def repo(tmp_path: Path, **extras: str) -> Path:
    models = {}
    for name, extra in extras.items():
        models[name] = {"config.pbtxt": IDENTITY.format(name=name, extra=extra), "1/model.py": "# not loaded\n"}
    return write_repository(tmp_path / "models", models)


def choose(repository: Path, backends, explicit: bool = False, load: tuple[str, ...] = (), **kw) -> auto.WorkerChoice:
    kw.setdefault("cores", 4)
    kw.setdefault("memory", 64 * 2**30)
    kw.setdefault("gpus", [])
    kw.setdefault("tenant_limits", False)
    return auto.choose(auto.repository_models([repository], explicit, load, None), backends, **kw)


def test_a_worker_per_usable_core_for_plain_models(tmp_path, backends):
    choice = choose(repo(tmp_path, a="", b=""), backends, cores=3)
    assert (choice.count, choice.describe()) == (3, "3 (auto: 3 usable cores)")


def test_one_core_runs_one_process(tmp_path, backends):
    assert choose(repo(tmp_path, a=""), backends, cores=1) == auto.WorkerChoice(1, "1 usable core")


def test_sequence_batching_keeps_one_process_and_names_the_model(tmp_path, backends):
    choice = choose(repo(tmp_path, a="", seq=SEQUENCE), backends)
    assert choice.count == 1
    assert "model 'seq' batches sequences" in choice.reason


def test_gpu_instances_keep_one_process(tmp_path, backends):
    choice = choose(repo(tmp_path, a="", gpu=GPU), backends)
    assert choice.count == 1 and "model 'gpu' has GPU instances" in choice.reason


def test_kind_auto_is_a_gpu_instance_only_where_gpus_are_visible(tmp_path, backends):
    repository = repo(tmp_path, a="")
    assert choose(repository, backends, gpus=[]).count == 4
    with_gpu = choose(repository, backends, gpus=[0])
    assert with_gpu.count == 1 and "model 'a' has GPU instances" in with_gpu.reason


def test_a_single_process_backend_keeps_one_process(tmp_path, backends):
    """vLLM and TensorRT register single_process=True; a model on either keeps one process,
    whether its config names the backend or only its model file says it (vLLM's model.json)."""
    assert backends.get("vllm").options.get("single_process") is True
    assert backends.get("tensorrt").options.get("single_process") is True
    assert not backends.get("python").options.get("single_process")
    models = tmp_path / "models"
    write_repository(models, {"plain": {"config.pbtxt": IDENTITY.format(name="plain", extra=""), "1/model.py": ""},
                              "llm": {"config.pbtxt": 'name: "llm"\n', "1/model.json": "{}"}})  # fmt: skip
    choice = choose(models, backends)
    assert choice.count == 1
    assert choice.reason == "model 'llm' runs on backend 'vllm', which keeps one engine per process"


def test_explicit_mode_looks_at_models_it_may_load_later(tmp_path, backends):
    """Explicit mode loads any repository model later through the API: a sequence model not
    named by --load-model still keeps one process."""
    choice = choose(repo(tmp_path, a="", seq=SEQUENCE), backends, explicit=True, load=("a",))
    assert choice.count == 1 and "'seq'" in choice.reason


def test_tenant_limits_keep_one_process(tmp_path, backends):
    choice = choose(repo(tmp_path, a=""), backends, tenant_limits=True)
    assert choice.count == 1 and "per-tenant limits" in choice.reason


def test_workers_lowered_to_what_fits_in_memory(tmp_path, backends):
    repository = repo(tmp_path, a="")
    (repository / "a" / "1" / "weights.bin").write_bytes(b"\0" * 1_000_000)
    size = sum(f.stat().st_size for f in (repository / "a").rglob("*") if f.is_file())
    # half the memory holds the models twice, not four times
    choice = choose(repository, backends, cores=4, memory=int(size * 2 / auto.MEMORY_SHARE) + 1)
    assert choice.count == 2 and "fit in memory 2 time(s)" in choice.reason
    # in explicit mode a model not loaded at start takes no memory
    assert choose(repository, backends, cores=4, memory=size, explicit=True).count == 4


def test_cgroup_quota_lowers_the_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert auto.cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert auto.cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert auto.cgroup_cpu_quota(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert auto.cgroup_cpu_quota(tmp_path) is None


@pytest.mark.parametrize(("value", "parsed"), [([], "auto"), (["--workers", "auto"], "auto"),
                                               (["--workers", "AUTO"], "auto"), (["--workers", "3"], 3)])  # fmt: skip
def test_the_flag_takes_auto_or_a_count(value, parsed):
    args = build_parser(PluginHost()).parse_args(["serve", "--model-repository", "/m", *value])
    assert args.workers == parsed


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_the_flag_refuses_anything_else(value, capsys):
    with pytest.raises(SystemExit):
        build_parser(PluginHost()).parse_args(["serve", "--model-repository", "/m", "--workers", value])
    assert "expected a whole number >= 1" in capsys.readouterr().err
