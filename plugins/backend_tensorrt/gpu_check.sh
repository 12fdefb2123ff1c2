#!/usr/bin/env bash
# One GPU check for the TensorRT plugin (and the ONNX plugin's CUDA provider), for an NVIDIA machine.
#
#   plugins/backend_tensorrt/gpu_check.sh            # venv in $VENV (default /tmp/inferd-gpu-venv)
#   PYTHON=/path/to/python plugins/backend_tensorrt/gpu_check.sh   # use an environment as it is
#   SKIP_INSTALL=1 ...                                # install nothing (the environment is ready)
#
# It installs core + the onnx and tensorrt plugins (TensorRT, CUDA bindings, onnxruntime-gpu with its
# CUDA libraries) + tritonclient, builds a small engine from an ONNX model with TensorRT's
# parser (dynamic batch profile), serves that engine and the same ONNX model on KIND_GPU with
# `inferd serve`, calls both over HTTP and gRPC, compares with numpy and prints PASS/FAIL lines.
# Exit status: 0 when every check passed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WORK="${WORK:-$(mktemp -d /tmp/inferd-gpu-check.XXXXXX)}"
NVIDIA_INDEX="${NVIDIA_INDEX:-https://pypi.nvidia.com}"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "FAIL nvidia-smi: no NVIDIA GPU or driver on this machine"
    exit 1
fi
echo "PASS nvidia-smi: $(nvidia-smi -L | head -n 1)"

# The driver's CUDA major version picks the CUDA 12 or CUDA 13 builds of TensorRT, the CUDA bindings
# and onnxruntime-gpu (whose PyPI builds moved from CUDA 12 to CUDA 13 after 1.24). FLAVOUR overrides.
CUDA_MAJOR="$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -n 1)"
if [ "${CUDA_MAJOR:-12}" -ge 13 ]; then FLAVOUR="${FLAVOUR:-cu13}"; else FLAVOUR="${FLAVOUR:-cu12}"; fi
if [ "$FLAVOUR" = cu13 ]; then ORT="onnxruntime-gpu[cuda,cudnn]>=1.25"; else ORT="onnxruntime-gpu[cuda,cudnn]>=1.19,<1.25"; fi
echo "INFO driver CUDA ${CUDA_MAJOR:-?}: installing the $FLAVOUR packages; work dir $WORK"

if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
else
    VENV="${VENV:-/tmp/inferd-gpu-venv}"
    # System site-packages: a preinstalled TensorRT / CUDA stack is reused instead of downloaded.
    [ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
    PY="$VENV/bin/python"
fi

if [ -z "${SKIP_INSTALL:-}" ]; then
    start=$SECONDS
    if ! "$PY" -m pip install -q --disable-pip-version-check --extra-index-url "$NVIDIA_INDEX" \
        -c "$ROOT/constraints.txt" \
        -e "$ROOT/core" -e "$ROOT/plugins/backend_onnx" -e "$ROOT/plugins/backend_tensorrt[gpu-$FLAVOUR]" \
        "$ORT" onnx "tritonclient[http,grpc]"; then
        echo "FAIL pip install (see above); rerun with PYTHON=... SKIP_INSTALL=1 in a ready environment"
        exit 1
    fi
    echo "PASS pip install in $((SECONDS - start)) s"
fi

exec timeout 600 "$PY" "$ROOT/plugins/backend_tensorrt/gpu_check.py" --work "$WORK"
