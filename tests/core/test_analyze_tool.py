"""``inferd analyze`` end to end: a small sweep over a Python model on a live inferd in explicit
mode; the exported config serves from a fresh repository; the original config is restored."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.config import parse_config_text
from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MODEL_PY = source("add_two")
FILES = {"config.pbtxt": textwrap.dedent(CONFIG), "1/model.py": textwrap.dedent(MODEL_PY)}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {"add": FILES, "idle": FILES}
    return serve(repo, "--model-control-mode=explicit", "--load-model=add")


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferd.host.cli", "analyze", *args], capture_output=True, text=True,
                          timeout=180)  # fmt: skip


def add_call(url: str) -> np.ndarray:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = [httpclient.InferInput("INPUT0", [2, 4], "FP32"), httpclient.InferInput("INPUT1", [2, 4], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(a)
    return httpclient.InferenceServerClient(url).infer("add", inputs).as_numpy("OUTPUT0")


def test_sweep_exports_a_config_that_serves(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = analyze("-m", "add", "-u", server.http_url, "--instance-counts", "2", "--dynamic-batching", "on,off",
                  "--queue-delays-us", "100", "--concurrency", "2", "-p", "500", "-r", "3", "--no-default-config",
                  "--latency-budget", "10000", "--top-n", "1", "--export-path", str(out))  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["ranking"]) == ["add_config_0", "add_config_1"]
    assert all(len(c["measurements"]) == 1 and c["meets_constraints"] for c in results["configs"])
    best = results["configs"][0]
    assert best["name"] == results["ranking"][0]
    assert best["measurements"][0]["throughput"] == max(c["measurements"][0]["throughput"] for c in results["configs"])

    # the exported best config parses, says what was measured, and has no leftovers of other candidates
    exported = out / best["name"] / "config.pbtxt"
    assert [str(exported)] == results["exported"]
    config = parse_config_text(exported.read_text(), str(exported))
    assert config.name == "add" and config.max_batch_size == 8
    assert [g.count for g in config.instance_group] == [2]
    m = best["measurements"][0]
    assert config.HasField("dynamic_batching") == m["dynamic_batching"]
    if m["dynamic_batching"]:
        assert config.dynamic_batching.max_queue_delay_microseconds == 100

    # the report has a plot and one row per configuration measured
    html = (out / "report.html").read_text()
    assert 'src="data:image/png;base64,' in html and "<svg" not in html
    for c in results["configs"]:
        assert f'<td class="name">{c["name"]}</td>' in html

    # the server serves its original configuration again
    served = httpclient.InferenceServerClient(server.http_url).get_model_config("add")
    assert [g["count"] for g in served["instance_group"]] == [1]
    assert "dynamic_batching" not in served
    assert (add_call(server.http_url) == 2 * np.arange(8, dtype=np.float32).reshape(2, 4)).all()

    # copied into a fresh repository, the exported config loads and serves as exported
    repo = write_repository(
        tmp_path / "fresh", {"add": {"config.pbtxt": exported.read_text(), "1/model.py": FILES["1/model.py"]}}
    )
    with ServerProcess([repo]) as fresh:
        assert (add_call(fresh.http_url) == 2 * np.arange(8, dtype=np.float32).reshape(2, 4)).all()
        fresh_config = httpclient.InferenceServerClient(fresh.http_url).get_model_config("add")
        assert [g["count"] for g in fresh_config["instance_group"]] == [2]
        assert ("dynamic_batching" in fresh_config) == m["dynamic_batching"]

        # a server without explicit model control: a clear error, nothing changed
        refused = analyze("-m", "add", "-u", fresh.http_url, "--concurrency", "1", "-p", "200", "-r", "1",
                          "--export-path", str(tmp_path / "refused"))  # fmt: skip
        assert refused.returncode == 1
        assert "--model-control-mode=explicit" in refused.stderr and "Traceback" not in refused.stderr


def test_unknown_model_is_a_clear_error(server: ServerProcess, tmp_path: Path) -> None:
    run = analyze("-m", "nope", "-u", server.http_url, "--export-path", str(tmp_path / "x"))
    assert run.returncode == 1 and "'nope'" in run.stderr and "Traceback" not in run.stderr


def test_a_model_not_loaded_is_loaded_then_unloaded(server: ServerProcess, tmp_path: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert not client.is_model_ready("idle")
    run = analyze("-m", "idle", "-u", server.http_url, "--instance-counts", "1", "--dynamic-batching", "off",
                  "--no-default-config", "--concurrency", "1", "-p", "300", "-r", "1",
                  "--export-path", str(tmp_path / "idle"))  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert (tmp_path / "idle" / "idle_config_0" / "config.pbtxt").is_file()
    assert not client.is_model_ready("idle")


def test_plot_is_an_inline_matplotlib_png() -> None:
    from inferd.tools.analyze.report import plot_html

    series = [("a", [(1.0, 800.0), (3.5, 1000.0)]), ("b <&>", [(2.0, 400.0), (4.0, 900.0)])]
    html = plot_html(series, 't "<x>"', "x", "y")
    prefix = '<img alt="t &quot;&lt;x&gt;&quot;" src="data:image/png;base64,'
    assert html.startswith(prefix) and html.endswith('"/>')
    assert base64.b64decode(html[len(prefix) : -3]).startswith(b"\x89PNG\r\n\x1a\n")


def test_without_matplotlib_analyze_names_the_install_before_measuring(tmp_path: Path) -> None:
    # matplotlib made unimportable in a child interpreter; the URL is never contacted
    code = ("import sys; sys.modules['matplotlib'] = None; from inferd.host.cli import main; "
            "sys.exit(main(['analyze', '-m', 'add', '-u', '127.0.0.1:9', '--export-path', sys.argv[1]]))")  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "needs the 'matplotlib' package" in run.stderr and "pip install 'inferd[tools]'" in run.stderr
    assert not (tmp_path / "out").exists()
