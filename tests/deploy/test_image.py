"""Build the CPU image with a container builder, run it on the example repository and call it.

Needs docker (with a daemon), podman or buildah that can run a container here, and the base image
(``python:3.11-slim-bookworm``) in its local storage, since no registry is reachable from the test
machines: load one with ``docker load`` / ``podman load`` (for instance built with debootstrap).
Where any of that is missing the test skips and says which part and why."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

from inferd.testing import free_port
from tests.deploy.conftest import ADD_SUB_BODY, ADD_SUB_SUM, ROOT, http_get, http_post

BASE_IMAGE = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M).group(1)  # type: ignore[union-attr]


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {exc.timeout} s")


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The runtime's own reason: its first line naming the OCI runtime or an error."""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    for line in lines:
        if "crun" in line or "runc" in line or "Cannot connect" in line:
            return line
    return lines[-1] if lines else f"exit code {done.returncode}"


def _can_run_containers(tool: str) -> str | None:
    """None if ``tool`` runs a container here, else why not (its own words)."""
    if tool == "docker":
        done = _run(["docker", "info", "--format", "{{.ServerVersion}}"])
        return None if done.returncode == 0 else f"docker: {_last_line(done)}"
    if tool == "podman":
        with tempfile.TemporaryDirectory() as rootfs:  # an empty root: the runtime starts, exec fails
            done = _run(["podman", "run", "--rm", "--rootfs", rootfs, "/nothing"])
    else:  # buildah runs a build's RUN steps in a container of its own
        made = _run(["buildah", "from", "scratch"])
        if made.returncode != 0:
            return f"buildah: {_last_line(made)}"
        done = _run(["buildah", "run", made.stdout.strip(), "/nothing"])
        _run(["buildah", "rm", made.stdout.strip()])
    if re.search(r"/nothing.*(no such file|not found)", done.stderr, re.I | re.S):
        return None
    return f"{tool}: {_last_line(done)}"


def _builder() -> str:
    """The first container tool that can build and run here, or skip saying why none can."""
    problems = []
    for tool in ("docker", "podman", "buildah"):
        if shutil.which(tool) is None:
            problems.append(f"{tool}: not installed")
            continue
        problem = _can_run_containers(tool)
        if problem is None:
            if _run([tool, "image", "inspect", BASE_IMAGE]).returncode != 0:
                problems.append(f"{tool}: base image {BASE_IMAGE} not in local storage and no registry reachable")
                continue
            return tool
        problems.append(problem)
    pytest.skip("no container builder can run here: " + "; ".join(problems))


def test_the_image_serves_the_example_repository():
    tool = _builder()
    runner = "podman" if tool == "buildah" else tool
    tag = f"inferd-test:{uuid.uuid4().hex[:8]}"
    build = [tool, "bud" if tool == "buildah" else "build", "-t", tag, "--build-arg", "BACKENDS=python", str(ROOT)]
    done = _run(build, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    port = free_port()
    name = f"inferd-test-{uuid.uuid4().hex[:8]}"
    started = _run([runner, "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", tag])
    try:
        assert started.returncode == 0, started.stderr
        user = _run([runner, "exec", name, "id", "-u"]).stdout.strip()
        assert user == "1000"
        deadline = time.monotonic() + 120
        while http_get(f"http://127.0.0.1:{port}/v2/health/ready")[0] != 200:
            assert time.monotonic() < deadline, _run([runner, "logs", name]).stdout[-4000:]
            time.sleep(0.5)
        status, body = http_post(f"http://127.0.0.1:{port}/v2/models/add_sub/infer", ADD_SUB_BODY)
        assert status == 200, body
        assert json.loads(body)["outputs"][0]["data"] == ADD_SUB_SUM
        stopped = _run([runner, "stop", "-t", "40", name], timeout=60)
        assert stopped.returncode == 0
        assert _run([runner, "inspect", "--format", "{{.State.ExitCode}}", name]).stdout.strip() == "0"
    finally:
        _run([runner, "rm", "-f", name])
        _run([runner, "rmi", "-f", tag])
