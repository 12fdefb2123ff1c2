"""Reading the deployment files as Kubernetes and inferd read them: rendered overlays, the image's
entrypoint, an inferd command line parsed by inferd's own parser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferd.host import triton_flags
from inferd.host.plugins import PluginHost
from inferd.host.serve_command import build_parser, options_from_args
from inferd.host.server import ServerOptions
from inferd.serving import tls
from tests.deploy.conftest import DEPLOY, ROOT

KUSTOMIZE = DEPLOY / "kubernetes"
OVERLAYS = ("cpu", "gpu", "autoscaling")

Doc = dict[str, Any]


def kubectl() -> str:
    """The kubectl binary (Debian's kubernetes-client: `make test-deps` installs it as root)."""
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl not found: `make test-deps` installs Debian's kubernetes-client when run as root")
    return path


def render(overlay: str) -> list[Doc]:
    """``kubectl kustomize deploy/kubernetes/overlays/<overlay>``, one dict per object."""
    out = subprocess.run([kubectl(), "kustomize", str(KUSTOMIZE / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[Doc], kind: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def yaml_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def entrypoint(dockerfile: Path) -> list[str]:
    """The exec-form ENTRYPOINT of a Dockerfile."""
    (line,) = re.findall(r"^ENTRYPOINT (\[.*\])$", dockerfile.read_text(), re.M)
    return json.loads(line)


def serve_options(argv: list[str]) -> ServerOptions:
    """What ``inferd serve <argv>`` would run with; fails on any flag inferd refuses or ignores."""
    args = build_parser(PluginHost()).parse_args(["serve", *argv])
    assert tls.refusal(vars(args)) is None
    assert triton_flags.warnings(vars(args)) == []
    return options_from_args(args)


def image_options(container: Doc) -> ServerOptions:
    """The options of a container running the image: its command (or the image's entrypoint)
    and its args."""
    command = container.get("command") or entrypoint(ROOT / "Dockerfile")
    assert command[:2] == ["inferd", "serve"], command
    return serve_options([*command[2:], *container.get("args", [])])
