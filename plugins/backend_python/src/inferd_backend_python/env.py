"""``EXECUTION_ENV_PATH``: a model's own Python environment, as Triton's python backend takes it.

The value is a conda-pack ``.tar.gz`` (or any tar archive) or an unpacked environment directory;
``$$TRITON_MODEL_DIRECTORY`` in it stands for the model's directory. An archive (a regular file)
is unpacked by :mod:`inferd_backend_python.archive` (nothing written outside its directory,
bounded in bytes and members: ``--backend-config=python,execution-env-max-bytes=...``) into a
private directory ``$TMPDIR/inferd-python-env-<pid>-<process start>-<pid namespace>-*``, once per
server process for the versions that use it (again when the file changes). The directory goes
when the last version using it unloads, when the load fails, when the process exits, and, left by
a process that died, when the next server starts (:func:`remove_stale`: only directories whose
process is gone). As in Triton
the environment must hold ``bin/activate``; its stub runs with ``VIRTUAL_ENV`` set, ``<env>/bin``
first on ``PATH``, ``<env>/lib`` first on ``LD_LIBRARY_PATH``, and neither ``PYTHONHOME`` nor the
server's ``PYTHONPATH``.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from inferd.api import InternalError, InvalidArgument, setting_integer
from inferd_backend_python import archive
from inferd_backend_python.archive import Limits
from inferd_backend_python.options import MAX_BYTES_SETTING, MAX_MEMBERS_SETTING

_log = logging.getLogger("inferd.contracts.backend.python")

MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"

PREFIX = "inferd-python-env-"

_lock = threading.Lock()


@dataclass
class _Unpacked:
    root: Path
    users: int
    owner: int  # the pid that unpacked it (a forked worker does not remove its parent's)


#: Archives unpacked by this process: (path, size, mtime) -> directory and its users.
_extracted: dict[tuple[str, int, int], _Unpacked] = {}


@dataclass(frozen=True)
class Environment:
    """Where an isolated model's interpreter is and what its process environment is."""

    python: str
    variables: dict[str, str]
    source: str
    #: The directory an archive was unpacked into (give it back with :func:`release`).
    unpacked: Path | None = None


def limits(settings: dict[str, str]) -> Limits:
    """The bounds of an unpacked archive, from ``--backend-config=python,...`` (ConfigError if bad)."""
    return Limits(
        setting_integer(settings, "python", MAX_BYTES_SETTING, archive.DEFAULT_MAX_BYTES, minimum=1),
        setting_integer(settings, "python", MAX_MEMBERS_SETTING, archive.DEFAULT_MAX_MEMBERS, minimum=1),
    )


def resolve(value: str, model_dir: Path) -> Path:
    """The path ``EXECUTION_ENV_PATH`` names, with ``$$TRITON_MODEL_DIRECTORY`` replaced."""
    return Path(value.replace(MODEL_DIRECTORY, str(model_dir)))


def prepare(path: Path, label: str, limits: Limits | None = None) -> Environment:
    """Unpack ``path`` if it is an archive; the environment's interpreter and variables (blocking).
    An unpacked archive is held until :func:`release`."""
    if not path.exists():
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' does not exist")
    if not path.is_dir() and not path.is_file():
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' is neither a directory nor a file")
    unpacked = None if path.is_dir() else _acquire(path, label, limits or Limits())
    try:
        return _environment(unpacked or path, path, label, unpacked)
    except BaseException:
        if unpacked is not None:
            _release(unpacked)
        raise


def release(environment: Environment, linger_s: float = 0.0) -> None:
    """Give back what :func:`prepare` returned: an archive's directory goes with its last user
    (``linger_s`` later: a load about to take it over finds it unpacked)."""
    if environment.unpacked is None:
        return
    if linger_s > 0:
        timer = threading.Timer(linger_s, _release, (environment.unpacked,))
        timer.daemon = True
        timer.start()
    else:
        _release(environment.unpacked)


def _environment(root: Path, path: Path, label: str, unpacked: Path | None) -> Environment:
    activate = root / "bin" / "activate"
    if not activate.is_file():
        raise InternalError(
            f"Path {activate} does not exist. The Python environment should contain an 'activate' script."
        )
    python = next((root / "bin" / n for n in ("python3", "python") if (root / "bin" / n).exists()), None)
    if python is None:
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' has no bin/python3 or bin/python")
    variables = dict(os.environ)
    for name in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP"):
        variables.pop(name, None)
    variables["VIRTUAL_ENV"] = str(root)
    variables["PATH"] = f"{root / 'bin'}:{variables.get('PATH', '')}".rstrip(":")
    variables["LD_LIBRARY_PATH"] = f"{root / 'lib'}:{variables.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    variables["PYTHONNOUSERSITE"] = "1"
    return Environment(str(python), variables, str(path), unpacked)


def _acquire(path: Path, label: str, limits: Limits) -> Path:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _lock:
        found = _extracted.get(key)
        if found is not None and found.root.is_dir():
            found.users += 1
            return found.root
        pid = os.getpid()
        target = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{_start_time(pid)}-{_pid_namespace()}-"))
        try:
            archive.extract(path, target, limits)
        except archive.Refused as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' is refused: {exc}{_hint(exc)}") from None
        except archive.read_errors() as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise InvalidArgument(f"{label}: cannot extract EXECUTION_ENV_PATH '{path}': {exc}") from exc
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        _extracted[key] = _Unpacked(target, 1, pid)
        return target


def _hint(exc: archive.Refused) -> str:
    setting = {"bytes": (MAX_BYTES_SETTING, "bytes"), "members": (MAX_MEMBERS_SETTING, "count")}.get(exc.bound or "")
    return f"; raise it with --backend-config=python,{setting[0]}=<{setting[1]}>" if setting else ""


def _release(root: Path) -> None:
    with _lock:
        for key, unpacked in list(_extracted.items()):
            if unpacked.root == root:
                unpacked.users -= 1
                if unpacked.users > 0:
                    return
                del _extracted[key]
                break
    shutil.rmtree(root, ignore_errors=True)


@atexit.register
def _remove_all() -> None:
    with _lock:
        mine = [u.root for u in _extracted.values() if u.owner == os.getpid()]
        _extracted.clear()
    for root in mine:
        shutil.rmtree(root, ignore_errors=True)


# --- directories left by processes that died --------------------------------------------------


def remove_stale(parent: Path | None = None) -> list[Path]:
    """Remove the unpacked environments in ``parent`` (the temporary directory) whose process is
    gone (a crash, SIGKILL): only this user's, named ``inferd-python-env-<pid>-<start>-<pid
    namespace>-*`` with a pid of this process's pid namespace (a container sharing the directory
    has pids of its own) that no longer runs, or runs a process started at another time (a reused
    pid). The removed directories."""
    parent = parent or Path(tempfile.gettempdir())
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        owner = _owner(entry.name)
        if owner is None or owner[2] != _pid_namespace() or _alive(owner[0], owner[1]):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.is_dir(follow_symlinks=False) and info.st_uid == os.geteuid():
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    if removed:
        _log.info(
            "removed %d Python environment(s) unpacked by processes that ended: %s",
            len(removed),
            ", ".join(str(p) for p in removed),
        )
    return removed


def _owner(name: str) -> tuple[int, int, int] | None:
    """The pid, start time and pid namespace a directory's name holds, None for another name."""
    if not name.startswith(PREFIX):
        return None
    fields = name[len(PREFIX) :].split("-", 3)
    if len(fields) < 4 or not all(f.isdigit() for f in fields[:3]):
        return None
    return int(fields[0]), int(fields[1]), int(fields[2])


def _alive(pid: int, start: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive, but is it the same one?
    now = _start_time(pid)
    return now == 0 or start == 0 or now == start


def _pid_namespace() -> int:
    """This process's pid namespace (the inode of ``/proc/self/ns/pid``; 0 where unknown)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _start_time(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (Linux; 0 where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0
