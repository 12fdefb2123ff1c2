"""Installing a plugin distribution is all it takes: entry points are discovered and used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.plugin_site import env_with, install_into

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_plugin"

TINY_CONFIG = """
backend: "tiny"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The tiny plugin installed (as a real wheel install) into a directory on PYTHONPATH."""
    return install_into(tmp_path_factory.mktemp("site"), FIXTURE)


def test_inferd_plugins_lists_discovered_plugins_and_broken_ones(site):
    out = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "plugins"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_with(site)},
    )
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "inferd-tiny 0.0.1" in lines["tiny"] and "backend: tiny" in lines["tiny"]
    assert "this plugin is broken on purpose" in lines["broken_tiny"]
    assert "reg" in lines["misnamed_tiny"] and "ERROR" in lines["misnamed_tiny"]
    assert "backend: python" in lines["python"]
    assert "frontend: http" in lines["http"]
    assert out.returncode == 1  # a broken plugin is worth a non-zero exit for scripts


def test_server_uses_backend_from_installed_plugin(site, tmp_path):
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": TINY_CONFIG, "1/model.tiny": ""}})
    with ServerProcess([repo], env=env_with(site)) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        inp = httpclient.InferInput("INPUT", [2, 2], "INT32")
        x = np.array([[1, 2], [3, 4]], np.int32)
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("triple", [inp]).as_numpy("OUTPUT"), x * 3)
        assert "broken on purpose" in srv.log()  # reported, and the server started anyway


def test_a_failing_registration_hook_is_reported_and_a_hook_wrapper_runs(site, tmp_path):
    """A plugin raising in its registration hook stops neither the other plugins, nor a hook wrapper
    around them, nor the server."""
    out = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "plugins"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_with(site)},
    )
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines["failing_tiny"].endswith("backend: tiny_half  ERROR: RuntimeError: this registration fails on purpose")
    assert lines["wrapping_tiny"].endswith("backend: tiny_wrapped")
    assert "plugin 'failing_tiny' failed in inferd_register_backends: this registration fails on purpose" in out.stderr
    wrapped = TINY_CONFIG.replace('backend: "tiny"', 'backend: "tiny_wrapped"')
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": TINY_CONFIG, "1/model.tiny": ""},
                                                  "wrapped": {"config.pbtxt": wrapped, "1/model.tiny": ""}})  # fmt: skip
    with ServerProcess([repo], env=env_with(site)) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        x = np.array([[1, 2], [3, 4]], np.int32)
        for model in ("triple", "wrapped"):
            inp = httpclient.InferInput("INPUT", [2, 2], "INT32")
            inp.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer(model, [inp]).as_numpy("OUTPUT"), x * 3)
        assert "this registration fails on purpose" in srv.log()


def test_misspelled_hook_is_reported_and_the_server_starts(site, tmp_path):
    """check_pending at start-up: a hook name inferd has no spec for names the plugin and the hook."""
    expected = (
        "plugin 'misspelled_tiny' implements unknown hook 'inferd_register_backend' "
        "(did you mean 'inferd_register_backends'?); the plugin is left out"
    )
    out = subprocess.run(
        [sys.executable, "-m", "inferd.host.cli", "plugins"],
        capture_output=True,
        text=True,
        env={**os.environ, **env_with(site)},
    )
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines["misspelled_tiny"].endswith(f"-  ERROR: {expected}")
    assert expected in out.stderr  # logged (at ERROR: before logging is configured only errors show)
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": TINY_CONFIG, "1/model.tiny": ""}})
    with ServerProcess([repo], env=env_with(site)) as srv:
        assert httpclient.InferenceServerClient(srv.http_url).is_model_ready("triple")
        assert expected in srv.log()


def test_trace_plugins_logs_the_registration_hook_calls(site, tmp_path):
    """INFERD_TRACE_PLUGINS=1: pluggy's hook trace, with who registered what, goes to the server log."""
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": TINY_CONFIG, "1/model.tiny": ""}})
    with ServerProcess([repo], env=env_with(site, INFERD_TRACE_PLUGINS="1")) as srv:
        log = srv.log()
    for hook in ("inferd_register_backends", "inferd_register_schedulers", "inferd_register_caches",
                 "inferd_register_frontends", "inferd_startup"):  # fmt: skip
        assert f"]   {hook} [hook]" in log, hook
        assert f"finish {hook} --> []" in log or hook == "inferd_startup", hook
    assert "backend 'tiny' registered by plugin 'tiny' [register]" in log
    assert "frontend 'http' registered by plugin 'http' [register]" in log
    with ServerProcess([repo], env=env_with(site)) as srv:
        assert "[hook]" not in srv.log()


def test_blocked_plugin_is_not_used(site, tmp_path):
    repo = write_repository(tmp_path / "models", {"triple": {"config.pbtxt": TINY_CONFIG, "1/model.tiny": ""}})
    with ServerProcess(
        [repo],
        ["--exit-on-error=false", "--strict-readiness=false"],
        env=env_with(site, INFERD_DISABLE_PLUGINS="tiny,broken_tiny,misnamed_tiny"),
    ) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["triple"]["state"] == "UNAVAILABLE"
        assert "backend 'tiny'" in index["triple"]["reason"] and "python" in index["triple"]["reason"]
        assert "broken on purpose" not in srv.log()


def test_discovery_stays_light():
    """Listing plugins imports no ML framework and none of the backends' implementation modules."""
    code = (
        "import sys; from inferd.host.plugins import PluginHost; h = PluginHost(); h.plugin_infos(); "
        "heavy = [m for m in ('torch', 'onnxruntime', 'xgboost', 'tensorrt', 'inferd_backend_python.backend') if m in sys.modules]; "
        "print(heavy); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
