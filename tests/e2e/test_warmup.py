"""model_warmup: requests run on every instance before the model is served."""

from __future__ import annotations

import json

import numpy as np
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository

RECORDER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = "{log}"
        self.name = args["model_instance_name"]

    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            with open(self.log, "a") as f:
                f.write(json.dumps({{"instance": self.name, "id": r.request_id(), "shape": list(a.shape),
                                    "sum": float(a.sum())}}) + "\\n")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]))
        return out
"""

CONFIG = """
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
model_warmup [
  {{ name: "zeros" batch_size: 2 count: 3 inputs {{ key: "INPUT0" value: {{ data_type: TYPE_FP32 dims: [ 3 ] zero_data: true }} }} }},
  {{ name: "from_file" batch_size: 1 inputs {{ key: "INPUT0" value: {{ data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "{file}" }} }} }}
]
"""


def test_warmup_runs_on_every_instance_before_serving(tmp_path):
    log = tmp_path / "calls.jsonl"
    data = np.array([1.5, 2.5, 3.0], np.float32)
    repo = write_repository(tmp_path / "models", {
        "warm": {"config.pbtxt": CONFIG.format(file="row.bin"), "warmup/row.bin": data.tobytes(),
                 "1/model.py": RECORDER.format(log=log)},
        "cold": {"config.pbtxt": CONFIG.format(file="missing.bin"), "1/model.py": RECORDER.format(log=tmp_path / "cold.jsonl")},
    })  # fmt: skip
    with ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"]) as srv:
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        zeros = [c for c in calls if c["id"] == "warmup zeros"]
        from_file = [c for c in calls if c["id"] == "warmup from_file"]
        assert len(zeros) == 6 and {c["instance"] for c in zeros} == {"warm_0_0", "warm_0_1"}
        assert all(c["shape"] == [2, 3] and c["sum"] == 0.0 for c in zeros)
        assert len(from_file) == 2 and all(c["sum"] == float(data.sum()) for c in from_file)

        client = httpclient.InferenceServerClient(srv.http_url)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["warm"]["state"] == "READY"
        assert index["cold"]["state"] == "UNAVAILABLE"
        assert "warmup 'from_file'" in index["cold"]["reason"] and "missing.bin" in index["cold"]["reason"]
