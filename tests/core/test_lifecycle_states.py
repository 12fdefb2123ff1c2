"""Model and version states: the Why enum, the reason texts clients read, and what the lifecycle
records when loads, reloads and unloads succeed or fail (an in-process ModelManager, real
default plugins, a tiny backend whose version files say whether they load)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from inferd.config import parse_config_text
from inferd.contracts.backend import Backend, InstanceSpec, Model, ModelLoadContext, SyncInstance
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.hookspecs import hookimpl
from inferd.engine.health import model_is_ready
from inferd.engine.states import ModelRecord, State, VersionState, Why
from inferd.host.plugins import PluginHost
from inferd.host.server import Server, ServerOptions
from inferd.lifecycle.manager import ControlMode, ModelManager
from inferd.repository.scan import diff
from inferd.testing import write_repository

# -- the states alone ------------------------------------------------------------------------------


def test_each_why_has_the_reason_text_clients_read():
    def reason(why: Why, detail: str = "") -> str:
        return VersionState(State.UNAVAILABLE, why, detail).reason

    assert reason(Why.NONE) == ""
    assert reason(Why.LOAD_FAILED, "bad {weights}") == "bad {weights}"
    assert reason(Why.RELOAD_FAILED, "boom") == "reload failed, previous version still serving: boom"
    assert reason(Why.UNLOADED) == "unloaded"
    assert reason(Why.REMOVED) == "removed from the repository"
    assert reason(Why.DEPENDENCY, "m") == "unloaded: it calls 'm', which was unloaded"


def test_only_load_and_reload_failures_are_failures():
    assert {why for why in Why if VersionState(State.UNAVAILABLE, why).failed} == {Why.LOAD_FAILED, Why.RELOAD_FAILED}


def test_index_rows_leave_out_empty_versions_and_reasons():
    record = ModelRecord("m")
    assert record.index_rows() == [{"name": "m"}]
    record.state = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "no backend")
    assert record.index_rows() == [{"name": "m", "state": "UNAVAILABLE", "reason": "no backend"}]
    record.versions = {2: VersionState(State.READY), 1: VersionState(State.UNAVAILABLE, Why.UNLOADED)}
    assert record.index_rows() == [
        {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "m", "version": "2", "state": "READY"},
    ]


def test_a_failure_before_any_version_loaded_lands_where_the_index_shows_it():
    record = ModelRecord("m")
    record.fail("bad config", [1, 3])
    assert record.versions == {3: VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "bad config")}
    assert record.state is None
    record.fail("bad config", [])
    assert record.versions == {} and record.state == VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, "bad config")
    assert record.load_error() == "bad config"
    record.state = None
    assert record.load_error() == "no version could be loaded"


# -- a manager on a real repository --------------------------------------------------------------

PLAIN = """
backend: "marker"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [ { model_name: "{step}" model_version: -1
  input_map { key: "{x}" value: "IN" } output_map { key: "{y}" value: "OUT" } } ] }
"""


def ensemble(step: str, x: str = "X", y: str = "Y") -> str:
    """An ensemble of one step: ``step``, whose input ``x`` and output ``y`` it maps."""
    return ENSEMBLE.replace("{step}", step).replace("{x}", x).replace("{y}", y)


class MarkerInstance(SyncInstance):
    def execute(self, requests):  # pragma: no cover - nothing is inferred here
        return []


class MarkerModel(Model):
    def create_instance(self, spec: InstanceSpec) -> SyncInstance:
        return MarkerInstance()


class MarkerBackend(Backend):
    """Loads a version unless its ``model.txt`` says ``fail: <message>``; auto-completing the config
    (which reads the highest version's file) fails when it says ``unreadable: <message>``."""

    name = "marker"
    default_model_filename = "model.txt"

    def autocomplete_config(self, config, model_dir: Path, version_dir: Path | None) -> None:
        text = (version_dir / "model.txt").read_text() if version_dir is not None else ""
        if text.startswith("unreadable: "):
            raise OSError(text.removeprefix("unreadable: "))

    def load_model(self, context: ModelLoadContext) -> Model:
        text = context.model_path.read_text()
        if text.startswith("fail: "):
            raise InvalidArgument(text.removeprefix("fail: "))
        return MarkerModel()


class MarkerPlugin:
    @hookimpl
    def inferd_register_backends(self, register):
        register("marker", MarkerBackend, model_filenames=("model.txt",))


def plain(*versions: str) -> dict[str, str]:
    """A plain model whose version n loads unless versions[n - 1] starts with 'fail: '."""
    files = {"config.pbtxt": PLAIN}
    files.update({f"{n}/model.txt": text for n, text in enumerate(versions, start=1)})
    return files


def run(repo: Path, scenario: Callable[[ModelManager], Awaitable[None]], config_name: str | None = None) -> None:
    async def main() -> None:
        host = PluginHost(load_entrypoints=False, plugins=[MarkerPlugin()], disabled=())
        options = ServerOptions([repo], ControlMode.EXPLICIT, model_config_name=config_name)
        manager = Server(options, host=host).manager  # the manager as the server wires it
        await manager.start()
        try:
            await scenario(manager)
        finally:
            await manager.shutdown()

    asyncio.run(main())


def rows(manager: ModelManager, name: str) -> list[tuple[str, str, str]]:
    return [
        (r.get("version", ""), r.get("state", ""), r.get("reason", ""))
        for r in manager.table.index()
        if r["name"] == name
    ]


def test_a_version_that_fails_to_load_is_unavailable_with_its_reason(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fail: the weights are corrupt")})

    async def scenario(manager: ModelManager) -> None:
        with pytest.raises(InvalidArgument) as err:
            await manager.load("m")
        assert (
            err.value.message == "load failed for model 'm': version 1 is at UNAVAILABLE state: the weights are corrupt"
        )
        assert rows(manager, "m") == [("1", "UNAVAILABLE", "the weights are corrupt")]
        assert manager.table.records["m"].versions[1].why is Why.LOAD_FAILED

    run(repo, scenario)


def test_a_failed_reload_keeps_the_old_version_serving_and_is_an_error(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        old = manager.table.resolve("m")
        assert rows(manager, "m") == [("1", "READY", "")]
        (repo / "m" / "1" / "model.txt").write_text("fail: out of memory")
        with pytest.raises(InvalidArgument) as err:
            await manager.load("m")
        reason = "reload failed, previous version still serving: out of memory"
        assert err.value.message == f"load failed for model 'm': version 1 is at UNAVAILABLE state: {reason}"
        assert rows(manager, "m") == [("1", "READY", reason)]
        assert manager.table.resolve("m") is old

    run(repo, scenario)


def test_a_failure_reading_like_an_unload_reason_is_still_a_failure(tmp_path):
    # Version 2 fails with a message that starts as an unload reason does; version 1 serves.
    config = PLAIN + "version_policy: { all: {} }\n"
    repo = write_repository(tmp_path, {"m": {**plain("fine", "fail: unloaded weights"), "config.pbtxt": config}})

    async def scenario(manager: ModelManager) -> None:
        with pytest.raises(
            InvalidArgument, match="load failed for model 'm': version 2 is at UNAVAILABLE state: unloaded weights$"
        ):
            await manager.load("m")
        assert rows(manager, "m") == [("1", "READY", ""), ("2", "UNAVAILABLE", "unloaded weights")]

    run(repo, scenario)


def test_unloaded_versions_say_why_and_removed_models_leave_the_index(tmp_path):
    repo = write_repository(tmp_path, {"a": plain("fine"), "b": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("a")
        await manager.load("b")
        await manager.unload("a")
        assert rows(manager, "a") == [("1", "UNAVAILABLE", "unloaded")]
        await manager.load("a")  # an unload is not a failure: the reload succeeds
        old = manager.snapshot
        for path in sorted((repo / "b").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / "b").rmdir()
        new = await asyncio.to_thread(manager.rescan)
        await manager.apply(new, diff(old, new))
        assert rows(manager, "b") == []  # gone from the repository and the index
        assert rows(manager, "a") == [("1", "READY", "")]

    run(repo, scenario)


def test_ensembles_load_their_steps_first_and_go_down_with_them(tmp_path):
    repo = write_repository(
        tmp_path,
        {
            "step": plain("fine"),
            "ens": {"config.pbtxt": ensemble("step")},
            "top": {"config.pbtxt": ensemble("ens", "IN", "OUT")},
        },
    )

    async def scenario(manager: ModelManager) -> None:
        await manager.load("top")  # loads 'step', then 'ens', then 'top'
        assert [r["name"] for r in manager.table.index(ready_only=True)] == ["ens", "step", "top"]
        await manager.unload("step")
        assert rows(manager, "ens") == [("1", "UNAVAILABLE", "unloaded: it calls 'step', which was unloaded")]
        assert rows(manager, "top") == [("1", "UNAVAILABLE", "unloaded: it calls 'step', which was unloaded")]
        assert manager.table.records["top"].versions[1].why is Why.DEPENDENCY

    run(repo, scenario)


def test_config_name_decides_what_an_ensemble_calls(tmp_path):
    # config.pbtxt says plain model; configs/pipe.pbtxt (chosen) says ensemble of 'step'.
    repo = write_repository(
        tmp_path, {"step": plain("fine"), "m": {**plain("fine"), "configs/pipe.pbtxt": ensemble("step")}}
    )

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        assert manager.table.resolve("m").config.platform == "ensemble"
        assert manager.table.resolve("step").version == 1  # loaded first, as its composing model

    run(repo, scenario, config_name="pipe")


def test_loading_completes_a_copy_of_the_scanned_config(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        assert [g.name for g in manager.table.resolve("m").config.instance_group] == ["m"]  # completed
        assert manager.snapshot.models["m"].config == parse_config_text(PLAIN, "m")  # untouched

    run(repo, scenario)


def test_a_new_version_that_fails_leaves_the_old_one_serving_until_its_files_are_fixed(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        old = manager.table.resolve("m")
        (repo / "m" / "2").mkdir()
        (repo / "m" / "2" / "model.txt").write_text("fail: corrupt weights")
        with pytest.raises(InvalidArgument) as err:
            await manager.load("m")
        assert err.value.message == "load failed for model 'm': version 2 is at UNAVAILABLE state: corrupt weights"
        assert rows(manager, "m") == [("1", "READY", ""), ("2", "UNAVAILABLE", "corrupt weights")]
        assert manager.table.resolve("m") is old and manager.table.resolve("m", "1") is old
        assert model_is_ready(manager.table.records["m"])

        (repo / "m" / "2" / "model.txt").write_text("fine")
        await manager.load("m")  # fixed: version 2 replaces version 1
        assert rows(manager, "m") == [("1", "UNAVAILABLE", "unloaded"), ("2", "READY", "")]
        assert manager.table.resolve("m").version == 2

    run(repo, scenario)


def test_a_failed_version_whose_files_are_removed_leaves_the_index(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        (repo / "m" / "2").mkdir()
        (repo / "m" / "2" / "model.txt").write_text("fail: corrupt weights")
        with pytest.raises(InvalidArgument):
            await manager.load("m")
        (repo / "m" / "2" / "model.txt").unlink()
        (repo / "m" / "2").rmdir()
        await manager.load("m")
        assert rows(manager, "m") == [("1", "READY", "")]

    run(repo, scenario)


def test_an_auto_complete_failure_is_the_failure_of_the_version_it_read(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        old = manager.table.resolve("m")
        (repo / "m" / "2").mkdir()
        (repo / "m" / "2" / "model.txt").write_text("unreadable: permission denied")
        with pytest.raises(
            InvalidArgument,
            match="load failed for model 'm': version 2 is at UNAVAILABLE state: OSError: permission denied$",
        ):
            await manager.load("m")
        assert rows(manager, "m") == [("1", "READY", ""), ("2", "UNAVAILABLE", "OSError: permission denied")]
        assert manager.table.resolve("m") is old

    run(repo, scenario)


def test_versions_that_served_keep_serving_until_every_picked_version_is_ready(tmp_path):
    # latest 2: versions 1 and 2 serve; version 3 appears broken, so the policy picks 2 and 3.
    config = PLAIN + "version_policy: { latest: { num_versions: 2 } }\n"
    repo = write_repository(tmp_path, {"m": {**plain("fine", "fine"), "config.pbtxt": config}})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        (repo / "m" / "3").mkdir()
        (repo / "m" / "3" / "model.txt").write_text("fail: half copied")
        with pytest.raises(InvalidArgument):
            await manager.load("m")
        assert sorted(manager.table.records["m"].serving) == [1, 2]  # 1 stays until 3 is READY
        assert rows(manager, "m") == [("1", "READY", ""), ("2", "READY", ""), ("3", "UNAVAILABLE", "half copied")]

    run(repo, scenario)


def test_an_auto_complete_failure_on_a_serving_version_is_a_failed_reload(tmp_path):
    repo = write_repository(tmp_path, {"m": plain("fine")})

    async def scenario(manager: ModelManager) -> None:
        await manager.load("m")
        old = manager.table.resolve("m")
        (repo / "m" / "1" / "model.txt").write_text("unreadable: permission denied")
        with pytest.raises(InvalidArgument):
            await manager.load("m")
        reason = "reload failed, previous version still serving: OSError: permission denied"
        assert rows(manager, "m") == [("1", "READY", reason)]
        assert manager.table.resolve("m") is old

    run(repo, scenario)
