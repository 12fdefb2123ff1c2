"""Hostile ``EXECUTION_ENV_PATH`` archives, loaded over the repository API of a real ``inferd serve``
with API keys (``--auth-config``): nothing is written outside the extraction directory, archives
past the bounds are refused before anything is written, the extraction directory goes when the
load fails, when the model unloads and (left by a dead process) when a server starts, and the
server keeps serving throughout.

Before the safe extractor, the hard-link archive below truncated and overwrote the server's
``--auth-config`` file (tarfile's ``tar`` filter does not check hard-link targets), a symbolic
link then a hard link to it wrote through to a file outside, FIFOs and device nodes were created,
and every failed load left its extracted copy in ``$TMPDIR``.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import stat
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.servers import Servers

MAX_BYTES = 1024 * 1024
MAX_MEMBERS = 200
PREFIX = "inferd-python-env-"
ADMIN = {"Authorization": "Bearer admin-key"}
MODEL_PY = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X")
                    .as_numpy() * 2)]) for r in requests]
    """
)
CONFIG = json.dumps({
    "backend": "python", "max_batch_size": 0,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
    "parameters": {"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}},
})  # fmt: skip


def start_time(pid: int) -> int:
    """The process's start in clock ticks since boot: field 22 of /proc/<pid>/stat."""
    return int(Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[19])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archives")


@pytest.fixture(scope="module")
def stale(root: Path) -> dict[str, Path]:
    """Directories in the server's TMPDIR before it starts: one of a process that exited, one of
    a live process (this one), one that is not an environment."""
    tmp = root / "tmp"
    tmp.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    ns = os.stat("/proc/self/ns/pid").st_ino
    dirs = {
        "dead": tmp / f"{PREFIX}{int(gone.stdout)}-{start_time(os.getpid())}-{ns}-abcd",
        "live": tmp / f"{PREFIX}{os.getpid()}-{start_time(os.getpid())}-{ns}-efgh",
        "other": tmp / "inferd-something-else",
    }
    for path in dirs.values():
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python3").write_bytes(b"x" * 1000)
    return dirs


@pytest.fixture(scope="module")
def server(root: Path, stale: dict[str, Path], serve: Servers) -> ServerProcess:
    repo = write_repository(root / "models", {"add_sub": models.add_sub()})
    auth = {
        "tenants": {
            "admin": {"keys": [digest("admin-key")], "apis": ["health", "metadata", "inference", "model-repository"]}
        }
    }
    (root / "auth.json").write_text(json.dumps(auth))
    args = [
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        f"--auth-config={root / 'auth.json'}",
        f"--backend-config=python,execution-env-max-bytes={MAX_BYTES}",
        f"--backend-config=python,execution-env-max-members={MAX_MEMBERS}",
    ]
    return serve(repo, *args, env={"TMPDIR": str(root / "tmp")})


# --- archives -----------------------------------------------------------------------------------


def member(name: str, data: bytes = b"", *, mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
           link: str = "") -> tuple[tarfile.TarInfo, bytes]:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.size = kind, mode, link, len(data)
    return info, data


def pack(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def working_env(*extra: tuple[tarfile.TarInfo, bytes]) -> bytes:
    """A packed environment that runs the stub: ``bin/python3`` a symbolic link to this
    interpreter outside it (as venv-pack leaves it), ``pyvenv.cfg``, ``bin/activate``, and a
    ``.pth`` file adding this environment's site-packages (numpy)."""
    python = os.path.realpath(sys.executable)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    purelib = sysconfig.get_paths()["purelib"]
    return pack(
        member("bin", kind=tarfile.DIRTYPE, mode=0o755),
        member("bin/python3", kind=tarfile.SYMTYPE, link=python),
        member("bin/python", kind=tarfile.SYMTYPE, link="python3"),
        member("bin/activate", b"# activate\n"),
        member("pyvenv.cfg", f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n".encode()),
        member(f"lib/{version}/site-packages/server.pth", f"{purelib}\n".encode()),
        *extra,
    )


# --- talking to the server ----------------------------------------------------------------------


def request(server: ServerProcess, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.http_url, timeout=120)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=ADMIN)
        response = conn.getresponse()
        text = response.read()
        return response.status, json.loads(text) if text else {}
    finally:
        conn.close()


def load(server: ServerProcess, name: str, archive: bytes) -> tuple[int, dict]:
    files = {"file:1/model.py": MODEL_PY.encode(), "file:env.tar.gz": archive}
    parameters = {"config": CONFIG, **{k: base64.b64encode(v).decode() for k, v in files.items()}}
    return request(server, "POST", f"/v2/repository/models/{name}/load", {"parameters": parameters})


def attempt(server: ServerProcess, name: str, archive: bytes) -> tuple[int, str]:
    """Load ``name`` with ``archive`` as its environment: the status and the error message."""
    status, body = load(server, name, archive)
    return status, body.get("error", "")


def refused(server: ServerProcess, name: str, answer: tuple[int, str]) -> str:
    """The load was answered 400 naming the model and the archive, left nothing unpacked, and the
    server still serves; the message."""
    status, message = answer
    assert status == 400, answer
    assert f"model '{name}'" in message and "env.tar.gz" in message, message
    assert unpacked(server) == [], unpacked(server)
    serves(server)
    return message


def serves(server: ServerProcess) -> None:
    """The server still answers inference (add_sub: 1 + 2 and 1 - 2)."""
    tensor = {"shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]}
    body = {"inputs": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor, "data": [2, 2, 2, 2]}]}
    status, answer = request(server, "POST", "/v2/models/add_sub/infer", body)
    assert status == 200, answer
    assert {o["name"]: o["data"] for o in answer["outputs"]} == {"OUTPUT0": [3] * 4, "OUTPUT1": [-1] * 4}


def unpacked(server: ServerProcess) -> list[Path]:
    """The environments the server unpacked still on disk: those in its TMPDIR but the live one
    planted before it started."""
    planted = f"{PREFIX}{os.getpid()}-"
    tmp = Path(server.env["TMPDIR"])
    return sorted(p for p in tmp.iterdir() if p.name.startswith(PREFIX) and not p.name.startswith(planted))


# --- escapes ------------------------------------------------------------------------------------


def test_a_hard_link_cannot_overwrite_the_auth_config(server: ServerProcess, root: Path) -> None:
    auth = root / "auth.json"
    before = auth.read_bytes()
    up = "../" * 40
    archive = pack(member("pwn", kind=tarfile.LNKTYPE, link=f"{up}{str(auth).lstrip('/')}"), member("pwn", b"{}"))
    answer = attempt(server, "hardlink", archive)
    assert auth.read_bytes() == before
    message = refused(server, "hardlink", answer)
    assert "member 'pwn' is a hard link" in message and "'..'" in message, message


def test_a_hard_link_to_an_absolute_path_is_refused(server: ServerProcess, root: Path) -> None:
    target = root / "absolute-target"
    target.write_text("unchanged")
    archive = pack(member("pwn", kind=tarfile.LNKTYPE, link=str(target)), member("pwn", b"owned"))
    answer = attempt(server, "hardlink_abs", archive)
    assert target.read_text() == "unchanged"
    message = refused(server, "hardlink_abs", answer)
    assert "absolute path" in message, message


def test_no_write_goes_through_a_symbolic_link_to_a_directory(server: ServerProcess, root: Path) -> None:
    outside = root / "outside-dir"
    outside.mkdir()
    archive = pack(member("d", kind=tarfile.SYMTYPE, link=str(outside)), member("d/planted", b"owned"))
    answer = attempt(server, "symlink_dir", archive)
    assert list(outside.iterdir()) == []
    message = refused(server, "symlink_dir", answer)
    assert "member 'd/planted' would be written through the symbolic link 'd'" in message, message


def test_no_write_goes_through_a_hard_link_to_a_symbolic_link(server: ServerProcess, root: Path) -> None:
    target = root / "victim.txt"
    target.write_text("unchanged")
    archive = pack(
        member("s", kind=tarfile.SYMTYPE, link=str(target)),
        member("h", kind=tarfile.LNKTYPE, link="s"),
        member("h", b"owned"),
    )
    answer = attempt(server, "symlink_hardlink", archive)
    assert target.read_text() == "unchanged"
    message = refused(server, "symlink_hardlink", answer)
    assert "member 'h' is a hard link to 's', which is not a file extracted before it" in message, message


def test_a_dot_dot_path_is_refused(server: ServerProcess, root: Path) -> None:
    answer = attempt(server, "dotdot", pack(member("../../../../../escaped", b"owned")))
    assert not list(root.rglob("escaped"))
    message = refused(server, "dotdot", answer)
    assert "member '../../../../../escaped' has '..' in it" in message, message


def test_an_absolute_path_is_refused(server: ServerProcess, root: Path) -> None:
    target = root / "absolute.txt"
    answer = attempt(server, "absolute", pack(member(str(target), b"owned")))
    assert not target.exists()
    message = refused(server, "absolute", answer)
    assert f"member '{target}' is an absolute path" in message, message


@pytest.mark.parametrize(("kind", "word"), [(tarfile.FIFOTYPE, "FIFO"), (tarfile.CHRTYPE, "character device"),
                                            (tarfile.BLKTYPE, "block device")])  # fmt: skip
def test_device_nodes_and_fifos_are_refused(server: ServerProcess, kind: bytes, word: str) -> None:
    info, _ = member("bin/node", kind=kind)
    info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
    answer = attempt(server, "node", working_env((info, b"")))
    assert not [p for root in unpacked(server) for p in root.rglob("node")]
    message = refused(server, "node", answer)
    assert f"member 'bin/node' is a {word}" in message, message


# --- bounds -------------------------------------------------------------------------------------


def test_an_archive_past_the_byte_limit_is_refused_before_anything_is_written(server: ServerProcess) -> None:
    zeros = pack(member("bin/python3", bytes(MAX_BYTES // 2)), member("lib/blob", bytes(MAX_BYTES // 2 + 1)))
    assert len(zeros) < MAX_BYTES // 100  # it inflates more than a hundredfold
    answer = attempt(server, "bomb", zeros)
    written = sum(p.stat().st_size for p in Path(server.env["TMPDIR"]).rglob("*") if p.is_file())
    assert written < MAX_BYTES // 10, written  # the uploaded archives and the directories planted before the start
    message = refused(server, "bomb", answer)
    assert f"more than the limit of {MAX_BYTES} bytes" in message, message
    assert "--backend-config=python,execution-env-max-bytes=" in message, message


def test_an_archive_past_the_member_limit_is_refused(server: ServerProcess) -> None:
    many = pack(*(member(f"f{i}") for i in range(MAX_MEMBERS + 1)))
    message = refused(server, "many", attempt(server, "many", many))
    assert f"more than the limit of {MAX_MEMBERS} members" in message, message
    assert "execution-env-max-members" in message, message


# --- the extraction directory's lifetime --------------------------------------------------------


def test_a_failed_load_leaves_no_directory(server: ServerProcess) -> None:
    message = refused(server, "no_python", attempt(server, "no_python", pack(member("bin/activate", b"# activate\n"))))
    assert "has no bin/python3 or bin/python" in message, message


def test_setuid_bits_are_stripped_and_unload_removes_the_directory(server: ServerProcess) -> None:
    archive = working_env(member("bin/tool", b"#!/bin/sh\n", mode=0o6755), member("lib/sticky", kind=tarfile.DIRTYPE,
                                                                                  mode=0o1777))  # fmt: skip
    status, body = load(server, "good", archive)
    assert status == 200, body
    status, answer = request(server, "POST", "/v2/models/good/infer",
                             {"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [21]}]})  # fmt: skip
    assert status == 200 and answer["outputs"][0]["data"] == [42], answer
    [root] = unpacked(server)
    mode = (root / "bin" / "tool").stat().st_mode
    assert stat.S_IMODE(mode) == 0o755, oct(mode)
    assert stat.S_IMODE((root / "lib" / "sticky").stat().st_mode) & 0o7022 == 0
    assert (root / "bin" / "python3").readlink() == Path(os.path.realpath(sys.executable))
    status, body = request(server, "POST", "/v2/repository/models/good/unload")
    assert status == 200, body
    deadline = time.monotonic() + 60
    while unpacked(server) and time.monotonic() < deadline:  # the unload may finish after the answer
        time.sleep(0.05)
    assert unpacked(server) == []
    serves(server)


def test_stale_directories_of_dead_processes_are_removed_at_start(server: ServerProcess,
                                                                   stale: dict[str, Path]) -> None:  # fmt: skip
    assert not stale["dead"].exists()
    assert (stale["live"] / "bin" / "python3").is_file()
    assert (stale["other"] / "bin" / "python3").is_file()
