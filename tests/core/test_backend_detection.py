"""A model whose config names no backend is matched by its files, creating only that backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inferd.contracts.backend import Backend
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.hookspecs import hookimpl
from inferd.host.plugins import PluginHost
from inferd.host.server import Server, ServerOptions
from inferd.repository.scan import scan

created: list[str] = []


def backend_class(name: str, filename: str) -> type[Backend]:
    class Fake(Backend):
        default_model_filename = filename

        def __init__(self) -> None:
            created.append(name)
            self.name = name

        def load_model(self, context):  # pragma: no cover - not loaded here
            raise NotImplementedError

    return Fake


class Plugin:
    @hookimpl
    def inferd_register_backends(self, register):
        register("alpha", backend_class("alpha", "model.alpha"), model_filenames=("model.alpha",))
        register("beta", backend_class("beta", "model.beta"), model_filenames=("model.beta",))


def detect(tmp_path: Path, filename: str):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / filename).write_text("")
    host = PluginHost(load_entrypoints=False, plugins=[Plugin()], disabled=())
    manager = Server(ServerOptions([tmp_path]), host=host).manager
    source = scan([tmp_path]).models["m"]
    from inferd.config import ModelConfig

    config = ModelConfig()
    return asyncio.run(asyncio.to_thread(manager.builder.backend_for, config, source)), config


def test_only_the_matching_backend_is_created(tmp_path):
    created.clear()
    backend, config = detect(tmp_path, "model.beta")
    assert backend.name == "beta"
    assert config.backend == "beta"
    assert created == ["beta"]


def test_no_match_names_the_installed_backends(tmp_path):
    created.clear()
    with pytest.raises(InvalidArgument) as err:
        detect(tmp_path, "model.gamma")
    assert "alpha" in err.value.message and "beta" in err.value.message
    assert created == []


def test_models_loading_on_several_threads_create_their_backend_once(tmp_path):
    """--model-load-thread-count: models that need a backend not created yet prepare at the same
    time; the first creates it and the others wait for it (two backends for one name was the
    old code's race)."""
    import threading
    import time

    class Slow(backend_class("slow", "model.slow")):
        def __init__(self) -> None:
            time.sleep(0.2)  # a framework import
            super().__init__()

    class SlowPlugin:
        @hookimpl
        def inferd_register_backends(self, register):
            register("slow", Slow)

    created.clear()
    host = PluginHost(load_entrypoints=False, plugins=[SlowPlugin()], disabled=())
    builder = Server(ServerOptions([tmp_path]), host=host).manager.builder
    got: list[Backend] = []
    threads = [threading.Thread(target=lambda: got.append(builder.backend("slow", "m"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert created == ["slow"] and len(got) == 4 and all(b is got[0] for b in got)
