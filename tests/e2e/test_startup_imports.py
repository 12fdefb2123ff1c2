"""What a plain ``inferd serve`` imports before it serves: nothing it does not use.

Each of the suite's ~150 server starts pays for every module imported at start-up. The server
runs under ``PYTHONPROFILEIMPORTTIME=1``, which makes Python write one line to stderr (the
server's log) per module imported, and the test reads the module names back from the log.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from inferd.testing import ServerProcess, write_repository
from tests.e2e.models import simple

ADD_ONE = """
    backend: "python"
    max_batch_size: 0
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
ADD_ONE_PY = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)])
                    for r in requests]
"""
#: Loaded only when a model, a flag or a request needs them.
NOT_AT_START = (
    # the frameworks behind the backends other than python's, and the plugins' clients
    "torch", "onnxruntime", "vllm", "xgboost", "treelite", "lightgbm", "tensorrt", "transformers", "tokenizers",
    "redis", "opentelemetry",
    # the backends' implementations (the python model's backend is used: not listed)
    "inferd_backend_onnx.backend", "inferd_backend_pytorch.backend", "inferd_backend_vllm.backend",
    "inferd_backend_fil.backend", "inferd_backend_tensorrt.backend",
    # the poller (--model-control-mode poll), the OpenAI app (no LLM loaded)
    "watchdog", "inferd_frontend_openai.app",
)  # fmt: skip
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)


def test_a_plain_start_imports_no_framework_and_nothing_it_does_not_serve(tmp_path: Path):
    repo = write_repository(
        tmp_path / "models", {"add_one": simple(textwrap.dedent(ADD_ONE), textwrap.dedent(ADD_ONE_PY))}
    )
    with ServerProcess([repo], env={"PYTHONPROFILEIMPORTTIME": "1"}) as srv:
        imported = set(IMPORT_LINE.findall(srv.log()))
    assert "inferd_backend_python.backend" in imported, "no import lines in the log:\n" + srv.log()[-2000:]
    unwanted = sorted(m for m in imported if m.split(".")[0] in NOT_AT_START or m in NOT_AT_START)
    assert not unwanted, f"imported by a plain start: {unwanted}"
