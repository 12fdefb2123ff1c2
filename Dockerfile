# syntax=docker/dockerfile:1
# inferd on CPU. Build:   docker build -t inferd:cpu --build-arg BACKENDS="python onnx" .
#                Run:     docker run -p 8000-8002:8000-8002 -v $PWD/models:/models inferd:cpu
# BACKENDS names plugins as scripts/install.sh reads them (python onnx pytorch fil cache_redis
# trace_otel ...). The GPU image is Dockerfile.gpu. Both install through scripts/install.sh, the
# script `make install` runs.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG BACKENDS="python onnx"
WORKDIR /src
COPY constraints.txt ./
COPY scripts/install.sh scripts/
COPY core core
COPY plugins plugins
RUN VENV=/opt/inferd PLUGINS="$BACKENDS" PIP_ARGS=--no-cache-dir scripts/install.sh

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --gid 1000 inferd && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin inferd
COPY --from=build /opt/inferd /opt/inferd
# The example repository, so that a bare `docker run` serves something; mount yours over it.
COPY examples/models /models
ENV PATH=/opt/inferd/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=2)"]
# SIGTERM drains (readiness false, requests in flight finish): give `docker stop -t` more than
# --drain-delay-secs + --exit-timeout-secs.
STOPSIGNAL SIGTERM
ENTRYPOINT ["inferd", "serve", "--model-repository", "/models"]
