# The README's commands. Everything installs into .venv from this repository's own files.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
PLUGINS := plugins/backend_python
STAMP  := $(VENV)/.installed
PORT_HTTP ?= 8000
PORT_GRPC ?= 8001
PORT_METRICS ?= 8002

.PHONY: install serve test protos lint bench clean

install: $(STAMP)

$(STAMP): constraints.txt requirements-dev.txt core/pyproject.toml $(wildcard plugins/*/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt -r requirements-dev.txt
	$(PIP) install -c constraints.txt -e core $(foreach p,$(PLUGINS),-e $(p))
	touch $(STAMP)

serve: install
	$(VENV)/bin/inferd serve --model-repository examples/models \
		--http-port $(PORT_HTTP) --grpc-port $(PORT_GRPC) --metrics-port $(PORT_METRICS)

test: install
	$(PY) -m pytest

protos: install
	$(PY) scripts/gen_protos.py

lint: install
	$(VENV)/bin/ruff check core plugins tests benchmarks

bench: install
	$(PY) benchmarks/latency.py

clean:
	rm -rf $(VENV) .pytest_cache
