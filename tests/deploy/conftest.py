"""What the deployment tests share: the repository root, the example repository in a temp dir, a
real `inferd serve` with traffic, and the inferd command line parser."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.plugins.frontend_openai.chat_model import write_chat_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "models"
DEPLOY = ROOT / "deploy"

ADD_SUB_BODY = json.dumps({
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [10, 20, 30, 40]},
    ]
}).encode()  # fmt: skip
#: What add_sub answers to ADD_SUB_BODY: OUTPUT0 = INPUT0 + INPUT1.
ADD_SUB_SUM = [11.0, 22.0, 33.0, 44.0]


def copy_add_sub(repo: Path, name: str = "add_sub", extra_config: str = "") -> Path:
    """The example add_sub model under ``repo/name`` (renamed, with ``extra_config`` appended)."""
    target = repo / name
    shutil.copytree(EXAMPLES / "add_sub", target)
    config = (target / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
    (target / "config.pbtxt").write_text(config + extra_config)
    return repo


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """Status and body of a GET (an HTTP error status is an answer, not an exception)."""
    return http_call(url, timeout=timeout)


def http_post(url: str, body: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    return http_call(url, "POST", body, {"Content-Type": "application/json"}, timeout)


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `inferd serve` for the package: add_sub, add_sub_cached (response cache on), latency
    histograms on, a chat model behind the OpenAI API, and some traffic (successes, cache hits, a
    failure, a streamed completion) already sent."""
    tmp = tmp_path_factory.mktemp("served")
    repo = copy_add_sub(tmp / "models")
    copy_add_sub(repo, "add_sub_cached", "response_cache { enable: true }\n")
    write_chat_model(repo, "chat")
    args = ["--cache-config", "local,size=1048576", "--metrics-config", "histogram_latencies=true",
            "--openai-port", "0"]  # fmt: skip
    with ServerProcess([repo], args, log_path=tmp / "inferd.log") as srv:
        openai_port = srv.ports["openai"]
        base = f"http://{srv.http_url}/v2/models"
        for model in ("add_sub", "add_sub", "add_sub_cached", "add_sub_cached"):
            status, body = http_post(f"{base}/{model}/infer", ADD_SUB_BODY)
            assert status == 200, body
        status, _ = http_post(f"{base}/add_sub/infer", b'{"inputs": []}')
        assert status == 400
        status, body = http_post(f"{base}/add_sub/traffic", b'{"weights": {"1": 1}}')  # the canary families
        assert status == 200, body
        completion = json.dumps({"model": "chat", "prompt": "the quick brown fox", "max_tokens": 4, "stream": True})
        status, body = http_post(f"http://127.0.0.1:{openai_port}/v1/completions", completion.encode(), timeout=30)
        assert status == 200 and b"data: [DONE]" in body, body
        yield srv


#: The installer, relative to the repository.
SCRIPT = "scripts/install.sh"


def installed_uv() -> Path | None:
    """The uv that install.sh installs (constraints.txt's version, in the user's cache), if it is there."""
    version = re.search(r"^uv==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    uv = cache / "inferd" / f"uv-{version.group(1) if version else 'latest'}" / "bin" / "uv"
    return uv if uv.is_file() else None
