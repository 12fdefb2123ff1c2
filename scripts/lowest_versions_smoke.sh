#!/usr/bin/env bash
# The lowest versions core/pyproject.toml allows of the serving stack (zttp, httptools,
# starlette, grpcio, protobuf), installed with core and the Python backend into a venv of their own,
# serve one inference over HTTP and one over gRPC on each gRPC transport; the guard test checks the
# internals inferd uses are there. What the lower bounds claim is what this tests (.ci/run runs it).
#
# Settings: PYTHON, the interpreter (default python3: use the lowest requires-python allows);
# SMOKE_VENV, the venv (default .venv-lowest, reused). pip's cache is used as it is.
set -euo pipefail
unset PYTHONPATH  # the venv's own installed copies are what is tested
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${SMOKE_VENV:-.venv-lowest}
work=$(mktemp -d)
trap 'kill $(cat "$work"/pid 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

# Each package of the stack pinned to its lower bound (an == pin stays as it is).
"$PYTHON" - core/pyproject.toml >"$work/lowest.txt" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
stack = {"zttp", "httptools", "starlette", "grpcio", "protobuf"}
for requirement in project["dependencies"]:
    name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
    low = re.search(r"(?:>=|==)\s*([0-9][^,;\s]*)", requirement)
    if name in stack:
        if low is None:
            sys.exit(f"{name} has no lower bound in core/pyproject.toml")
        print(f"{name}=={low.group(1)}")
        stack.discard(name)
if stack:
    sys.exit(f"not in core/pyproject.toml's dependencies: {sorted(stack)}")
print(f"# Python {sys.version_info.major}.{sys.version_info.minor}; requires-python {project['requires-python']}",
      file=sys.stderr)
EOF
echo "lowest versions:" $(grep -v '^#' "$work/lowest.txt")

test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
$pip install --no-compile -c "$work/lowest.txt" ./core ./plugins/backend_python pytest
$pip check
installed=$($pip freeze | grep -iE '^(zttp|httptools|starlette|grpcio|protobuf)==' | sort -f)
expected=$(grep -v '^#' "$work/lowest.txt" | sort -f)
if [ "$(echo "$installed" | tr 'A-Z' 'a-z')" != "$(echo "$expected" | tr 'A-Z' 'a-z')" ]; then
  echo "installed: $installed"; echo "expected: $expected"; exit 1
fi

# The internals inferd relies on, checked on these versions (no plugins from the dev venv: -o addopts).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -o addopts="" -W ignore::pytest.PytestConfigWarning tests/core/test_serving_internals.py

mkdir -p "$work/models/double/1"
cat >"$work/models/double/config.pbtxt" <<'EOF'
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
EOF
cat >"$work/models/double/1/model.py" <<'EOF'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
                for r in requests]
EOF

for transport in h2 grpcio; do
  rm -f "$work/ports.json"
  "$VENV/bin/inferd" serve --model-repository "$work/models" --http-address 127.0.0.1 --http-port 0 --grpc-port 0 \
    --metrics-port 0 --grpc-transport "$transport" --ports-file "$work/ports.json" >"$work/serve.log" 2>&1 &
  echo $! >"$work/pid"
  "$VENV/bin/python" - "$work/ports.json" "$transport" <<'EOF' || { cat "$work/serve.log"; exit 1; }
import json, os, sys, time, urllib.request

import grpc
import numpy as np

from inferd.frontends.grpc import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc

ports_file, transport = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 60
while not os.path.exists(ports_file):
    assert time.monotonic() < deadline, "inferd did not start"
    time.sleep(0.05)
ports = json.load(open(ports_file))
http = f"http://127.0.0.1:{ports['http']}"
while True:
    try:
        if urllib.request.urlopen(f"{http}/v2/health/ready", timeout=5).status == 200:
            break
    except OSError:
        pass
    assert time.monotonic() < deadline, "inferd did not become ready"
    time.sleep(0.05)

body = json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}).encode()
request = urllib.request.Request(f"{http}/v2/models/double/infer", body, {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=10))
assert answer["outputs"][0]["data"] == [2, 4, 6, 8], answer

with grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel:
    call = pb.ModelInferRequest(model_name="double")
    call.inputs.add(name="IN", datatype="FP32", shape=[4])
    call.raw_input_contents.append(np.arange(1, 5, dtype=np.float32).tobytes())
    reply = rpc.GRPCInferenceServiceStub(channel).ModelInfer(call, timeout=10)
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [2, 4, 6, 8], reply
print(f"served over HTTP and gRPC ({transport})")
EOF
  kill "$(cat "$work/pid")"
  wait "$(cat "$work/pid")" || true
done
echo "lowest versions smoke: ok"
