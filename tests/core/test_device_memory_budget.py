"""``--model-device-memory-budget`` (``inferd.lifecycle.device_budget``), eviction for a device
(``inferd.lifecycle.budget.choose_victims`` with devices), and what models report
(``inferd.lifecycle.model_memory``: ``Model.memory_usage``, plugin API 1.2)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from inferd.api import MemoryUsage, Model
from inferd.lifecycle.budget import Loaded, choose_victims
from inferd.lifecycle.device_budget import no_room, parse_device_budgets
from inferd.lifecycle.model_memory import ModelMemory

GIB = 1 << 30
TOTALS = {"cuda:0": 80 * GIB, "cuda:1": 40 * GIB}


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["cuda:0=20GiB"], {"cuda:0": 20 * GIB}),
        (["CUDA:1 = 512MiB"], {"cuda:1": 512 << 20}),
        (["cuda:0=0.5", "cuda:1=25%"], {"cuda:0": 40 * GIB, "cuda:1": 10 * GIB}),
        (["cuda:0=1G", "cuda:0=2G"], {"cuda:0": 2 * GIB}),  # a later one for a device wins
        (["xpu:0=1073741824"], {"xpu:0": GIB}),  # any device a backend names, in bytes
        ([], {}),
    ],
)
def test_device_budget_in_bytes_or_a_share_of_the_device(texts: list[str], expected: dict[str, int]) -> None:
    assert parse_device_budgets(texts, lambda: TOTALS) == expected


def test_bytes_never_ask_for_the_devices_memory() -> None:
    def unreachable() -> dict[str, int]:
        raise AssertionError("no share given: nvidia-smi is not asked")

    assert parse_device_budgets(["cuda:0=8G"], unreachable) == {"cuda:0": 8 * GIB}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("cuda0=1G", "give DEVICE=SIZE"),
        ("cuda:0", "give DEVICE=SIZE"),
        ("cuda:0=lots", "give bytes"),
        ("cuda:0=0", "more than 0"),
        ("cuda:0=150%", "at most 1"),
        ("cuda:7=0.5", "the memory of cuda:7 is unknown (nvidia-smi reports: cuda:0 (80.0 GiB), cuda:1 (40.0 GiB)); give bytes"),
    ],
)  # fmt: skip
def test_a_bad_device_budget_says_what_to_give(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="--model-device-memory-budget") as error:
        parse_device_budgets([text], lambda: TOTALS)
    assert why in str(error.value)


def _loaded(key: str, last_used: float, device: dict[str, int], footprint: int = 0, evictable: bool = True) -> Loaded:
    return Loaded(key, footprint, last_used, evictable, device)


def test_a_device_short_of_room_evicts_only_models_holding_memory_there() -> None:
    models = [
        _loaded("cpu", 1.0, {}),  # the least recently used, but it frees nothing on cuda:0
        _loaded("other", 2.0, {"cuda:1": 4 * GIB}),
        _loaded("a", 3.0, {"cuda:0": 4 * GIB}),
        _loaded("b", 4.0, {"cuda:0": 4 * GIB}),
    ]
    budgets = {"cuda:0": 10 * GIB, "cuda:1": 10 * GIB}
    assert choose_victims(models, 0, None, {"cuda:0": 2 * GIB}, budgets) == []
    assert choose_victims(models, 0, None, {"cuda:0": 4 * GIB}, budgets) == ["a"]
    assert choose_victims(models, 0, None, {"cuda:0": 8 * GIB}, budgets) == ["a", "b"]
    assert choose_victims(models, 0, None, {"cuda:0": 11 * GIB}, budgets) is None  # more than the device holds
    # a device without a budget is not counted
    assert choose_victims(models, 0, None, {"cuda:2": 100 * GIB}, budgets) == []


def test_host_and_device_budgets_together() -> None:
    models = [
        _loaded("cpu", 1.0, {}, footprint=6 * GIB),
        _loaded("gpu", 2.0, {"cuda:0": 8 * GIB}, footprint=GIB),
        _loaded("busy", 0.5, {"cuda:0": 2 * GIB}, footprint=GIB, evictable=False),
    ]
    # the host is short: the least recently used evictable model goes, whatever it holds
    assert choose_victims(models, 4 * GIB, 10 * GIB) == ["cpu"]
    # the device is short too: the host's victim is not enough, the device's holder goes next
    assert choose_victims(models, 4 * GIB, 10 * GIB, {"cuda:0": GIB}, {"cuda:0": 10 * GIB}) == ["cpu", "gpu"]
    # only the device is short: the CPU model stays
    assert choose_victims(models, 0, 10 * GIB, {"cuda:0": GIB}, {"cuda:0": 10 * GIB}) == ["gpu"]
    # the busy model never goes: with it alone on the device, nothing can make room for 9 GiB
    assert choose_victims(models, 0, None, {"cuda:0": 9 * GIB}, {"cuda:0": 10 * GIB}) is None


class _Reporting(Model):
    def __init__(self, usage: MemoryUsage | None = None, fails: bool = False) -> None:
        self.usage, self.fails = usage, fails

    def create_instance(self, spec):
        raise NotImplementedError

    def memory_usage(self) -> MemoryUsage | None:
        if self.fails:
            raise RuntimeError("no counter here")
        return self.usage


@dataclass
class _Version:
    model: Model | None


def test_a_models_footprint_is_its_rss_growth_plus_what_its_versions_report(caplog: pytest.LogCaptureFixture) -> None:
    memory = ModelMemory()
    v1 = _Version(_Reporting(MemoryUsage(host_bytes=100, device_bytes={"cuda:0": 5, "cuda:1": 0})))
    v2 = _Version(_Reporting(MemoryUsage(host_bytes=20, device_bytes={"cuda:0": 7})))
    assert memory.loaded("m", 1000, [v1, v2, _Version(None), _Version(_Reporting())]) == 1120
    assert memory.device["m"] == {"cuda:0": 12}  # a device holding 0 is left out
    assert Model.memory_usage(_Reporting()) is None  # the default reports nothing
    # read again: the report changed (a stub grew)
    v1.model = _Reporting(MemoryUsage(host_bytes=300))
    assert memory.read("m", [v1, v2]) == 1320
    assert memory.device_used() == {"cuda:0": 7}
    # a report that fails is left out, once logged, and the footprint is still the RSS growth
    assert memory.loaded("bad", 50, [_Version(_Reporting(fails=True))]) == 50
    assert memory.read("bad", [_Version(_Reporting(fails=True))]) == 50
    assert [r.getMessage() for r in caplog.records] == [
        "model 'bad': memory_usage() failed (RuntimeError: no counter here); its report is left out"
    ]
    memory.forget("m")
    assert memory.footprint("m") == 0 and memory.last_device["m"] == {"cuda:0": 7}  # what its next load expects


def test_a_refusal_names_the_budgets_and_the_device() -> None:
    reason = no_room("llm", 1 << 20, {"cuda:0": 8 * GIB}, None, {"cuda:0": 10 * GIB}, ["a", "b"])
    assert reason == (
        "model 'llm' cannot be loaded now: it needs about 1.0 MiB and cuda:0 8.0 GiB and the memory budget "
        "(cuda:0 10.0 GiB, --model-device-memory-budget) is held by models that are busy, pinned or steps of a "
        "loaded ensemble (a, b); retry later"
    )
    both = no_room("m", GIB, {}, 2 * GIB, {"cuda:0": GIB}, [])
    assert "the memory budgets (2.0 GiB, --model-memory-budget; cuda:0 1.0 GiB, --model-device-memory-budget)" in both
