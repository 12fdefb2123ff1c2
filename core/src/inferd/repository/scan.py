"""Scanning model repositories into snapshots and diffing two snapshots.

Both are pure: a scan reads the file tree (parsing each model's config once) and returns data;
``diff`` compares data. Applying a diff (loading, swapping, unloading) is the lifecycle's job.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from inferd.config import ModelConfig, load_config
from inferd.contracts.errors import InferdError, InternalError, InvalidArgument, poll_failure
from inferd.repository.names import MAX_NAME_BYTES, inside, name_problem, shown

#: The largest version number (Triton's versions are int64).
MAX_VERSION = (1 << 63) - 1
_ASCII_DIGITS = frozenset("0123456789")


def version_number(text: str) -> int | None:
    """The version a version directory's name (or any version written as text) stands for, as
    Triton reads directory names: ASCII digits without a leading zero ("0" itself is version 0),
    at most :data:`MAX_VERSION`; None for anything else ("01", "+1", " 1", "1.0", "١")."""
    if not text or len(text) > 19 or not _ASCII_DIGITS.issuperset(text) or (text[0] == "0" and text != "0"):
        return None
    number = int(text)
    return number if number <= MAX_VERSION else None


def model_key(namespace: str, name: str) -> str:
    """How the server keys a model: its name, or with ``--model-namespacing`` its repository and
    name as Triton writes them in its log (``<repository>::<name>``)."""
    return f"{namespace}::{name}" if namespace else name


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A model directory found in a repository, with a fingerprint of everything under it and
    its config, parsed at scan time (``None`` when the directory has none)."""

    name: str
    path: Path
    repository: Path
    fingerprint: str
    #: Shared by every reader: copy it before changing it. Left out of comparisons, since the
    #: fingerprint already covers the file it came from.
    config: ModelConfig | None = field(default=None, compare=False)
    #: Why the config could not be read, reported when the model loads ("" when it could).
    config_error: str = field(default="", compare=False)
    #: With ``--model-namespacing``, the repository the model was found in (Triton's model
    #: namespace: its path or URL); "" otherwise.
    namespace: str = ""

    @property
    def key(self) -> str:
        """The model's key in a :class:`Snapshot` and in the model table (:func:`model_key`)."""
        return model_key(self.namespace, self.name)

    @property
    def is_ensemble(self) -> bool:
        config = self.config
        return config is not None and (config.platform == "ensemble" or config.HasField("ensemble_scheduling"))

    @property
    def step_models(self) -> tuple[str, ...]:
        """The models an ensemble's steps call, in step order without repeats; () otherwise."""
        if self.config is None:
            return ()
        return tuple(dict.fromkeys(s.model_name for s in self.config.ensemble_scheduling.step))

    def version_dirs(self) -> dict[int, Path]:
        """Numeric version directories. Like Triton, names with a leading zero are ignored."""
        out: dict[int, Path] = {}
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return out
        for entry in entries:
            number = version_number(entry.name)
            if number is not None and entry.is_dir():
                out[number] = Path(entry.path)
        return out


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every model found across the repositories by key (:func:`model_key`), plus names found
    more than once (only without ``--model-namespacing``: with it, each repository keeps its own)."""

    models: dict[str, ModelSource] = field(default_factory=dict)
    duplicates: dict[str, list[Path]] = field(default_factory=dict)
    #: Models listed from a remote repository that cannot be read now, with the reason: they
    #: come from its last listing that could, and keep serving.
    stale: dict[str, str] = field(default_factory=dict)
    #: With ``--model-namespacing``: each name's keys, in repository order (empty otherwise).
    named: dict[str, list[str]] = field(default_factory=dict)

    def keys_of(self, name: str) -> list[str]:
        """The keys of the models named ``name`` (one per repository holding it)."""
        if self.named:
            return self.named.get(name, [])
        return [name] if name in self.models else []


class RemoteRepository(Protocol):
    """A repository outside the local file system, mirrored into local directories
    (``inferd.repository.object_store.ObjectStoreRepository``)."""

    url: str
    #: Why the last :meth:`sync` could not read the repository ("" when it could).
    error: str

    def sync(self) -> dict[str, tuple[Path, str]]:
        """Each model's local directory and fingerprint, fetching what changed (blocking)."""
        ...

    def check(self) -> None:
        """Raise RuntimeError, saying why, when the repository cannot be read (blocking)."""
        ...


#: A ``--model-repository``: a local directory or a remote repository.
Repository = Path | RemoteRepository


@dataclass(frozen=True, slots=True)
class RepositoryDiff:
    added: list[str]
    removed: list[str]
    modified: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)


def fingerprint(path: Path) -> str:
    """A hash of the relative path, size, mtime and mode of every file, and the relative path of
    every directory, under ``path`` (the mode: a file made readable again is a change to load).

    Python's bytecode caches (``__pycache__``, written when a model.py is imported) are left out,
    and so are directories' own mtimes (writing ``1/__pycache__`` changes ``1``'s): loading a model
    must not make its files look changed. A file added, removed or changed still changes the hash.
    """
    digest = hashlib.blake2b(digest_size=16)
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel_root = os.path.relpath(root, path)
        for name in sorted(files):
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue  # vanished while scanning; the next scan sees the settled tree
            digest.update(f"{rel_root}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        for name in dirs:
            full = os.path.join(root, name)
            target = os.readlink(full) if os.path.islink(full) else ""  # os.walk does not follow links
            digest.update(f"{rel_root}/{name}/\0{target}\n".encode())
    return digest.hexdigest()


def _is_model_dir(entry: os.DirEntry[str]) -> bool:
    return entry.is_dir() and not entry.name.startswith(".") and entry.name != "__pycache__"


def read_config(path: Path, config_name: str | None = None) -> tuple[ModelConfig | None, str]:
    """A model directory's config, chosen as Triton's ``--model-config-name`` does, and "";
    or ``None`` and the reason it cannot be read, as the load will report it."""
    try:
        return load_config(path, config_name), ""
    except Exception as exc:
        return None, exc.message if isinstance(exc, InferdError) else f"{type(exc).__name__}: {exc}"


def _source(
    previous: Snapshot | None, name: str, path: Path, namespace: str, config_name: str | None, stamp: str = ""
) -> ModelSource:
    stamp = stamp or fingerprint(path)  # before the config: a config changed meanwhile shows next scan
    old = previous.models.get(model_key(namespace, name)) if previous is not None else None
    if old is not None and old.path == path and old.fingerprint == stamp:
        return old
    return ModelSource(name, path, path.parent, stamp, *read_config(path, config_name), namespace=namespace)


def namespace_of(repo: Repository) -> str:
    """A repository's model namespace under ``--model-namespacing`` when none is given: its path or URL."""
    return str(repo) if isinstance(repo, Path) else repo.url


def scan(
    repositories: Sequence[Repository],
    config_name: str | None = None,
    previous: Snapshot | None = None,
    namespacing: bool = False,
    namespaces: Sequence[str] = (),
) -> Snapshot:
    """Read every repository; a name found in two repositories is reported, not loaded, unless
    ``namespacing`` (``--model-namespacing``) keys each model by its repository's namespace
    (``namespaces[i]`` for ``repositories[i]``; its path or URL when not given) and name.

    Models whose fingerprint is unchanged since ``previous`` (a scan with the same
    ``config_name``) keep its parsed config instead of being parsed again. A remote repository
    is synced first (its changed models fetched into fresh local directories).
    """
    models: dict[str, ModelSource] = {}
    seen: dict[str, list[Path]] = {}
    stale: dict[str, str] = {}
    given: set[str] = set()
    for i, repo in enumerate(repositories):
        namespace = (namespaces[i] if namespaces else namespace_of(repo)) if namespacing else ""
        if namespace and namespace in given:
            continue  # a repository given twice (Triton keeps a set of them)
        given.add(namespace)
        for name, path, stamp in _model_dirs(repo):
            key = model_key(namespace, name)
            seen.setdefault(key, []).append(path)
            models[key] = _source(previous, name, path, namespace, config_name, stamp)
            if not isinstance(repo, Path) and repo.error:
                stale[key] = repo.error
    duplicates = {key: paths for key, paths in seen.items() if len(paths) > 1}
    for key in duplicates:
        models.pop(key, None)
    named: dict[str, list[str]] = {}
    if namespacing:
        for key, source in models.items():
            named.setdefault(source.name, []).append(key)
    return Snapshot(models, duplicates, stale, named)


def _model_dirs(repo: Repository) -> list[tuple[str, Path, str]]:
    """Each model directory of ``repo`` by name, with its fingerprint when the repository
    knows it ("" for a local directory: the scan computes it)."""
    if not isinstance(repo, Path):
        return [(name, path, stamp) for name, (path, stamp) in sorted(repo.sync().items())]
    try:
        entries = sorted(os.scandir(repo), key=lambda e: e.name)
    except OSError:
        return []
    return [(e.name, Path(e.path), "") for e in entries if _is_model_dir(e)]


def diff(old: Snapshot, new: Snapshot) -> RepositoryDiff:
    """Models added, removed and modified (any file under the model directory changed)."""
    added = sorted(set(new.models) - set(old.models))
    removed = sorted(set(old.models) - set(new.models))
    modified = sorted(
        name
        for name in set(old.models) & set(new.models)
        if old.models[name].fingerprint != new.models[name].fingerprint
        or old.models[name].path != new.models[name].path
    )
    return RepositoryDiff(added, removed, modified)


class OverrideDirs:
    """Private model directories holding the files of load requests (Triton's
    ``file:<version>/<name>`` load parameters), all under one temporary folder."""

    def __init__(self) -> None:
        self._root: Path | None = None

    def write(self, name: str, files: dict[str, bytes]) -> ModelSource:
        """A fresh directory for model ``name`` holding just ``files`` (blocking).

        A model or file name that could leave the private folder, or that no file system could
        hold, is refused with Triton's sentence; every path is resolved and checked to lie under
        the private folder before anything is written, and that folder is never named in the error.
        """
        check_model_name(name)
        for rel in files:
            _check_file_name(name, rel)
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="inferd-overrides-"))
        root = Path(tempfile.mkdtemp(prefix="load-", dir=self._root))
        rel = ""
        try:
            model_dir = inside(self._root, root / name)
            for rel, content in files.items():
                dest = inside(model_dir, model_dir / rel)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(content)
        except (ValueError, OSError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            if not isinstance(exc, OSError):
                where = f"file path 'file:{_short(rel)}'" if rel else "the model name"
                raise InvalidArgument(f"{poll_failure(name)}: {where} leaves the model directory") from None
            raise InvalidArgument(
                f"{poll_failure(name)}: cannot write file 'file:{_short(rel)}': {exc.strerror or type(exc).__name__}"
            ) from None
        return ModelSource(name, model_dir, root, fingerprint="")

    def discard(self, source: ModelSource) -> None:
        """Delete the directory one :meth:`write` made (blocking); other sources are left alone."""
        if self._root is not None and source.repository.parent == self._root:
            shutil.rmtree(source.repository, ignore_errors=True)

    def remove(self) -> None:
        """Delete every directory written so far (blocking)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


#: Longest relative path accepted in a load request (each name in it: ``names.MAX_NAME_BYTES``).
PATH_MAX = 1024


def check_model_name(name: str) -> None:
    """Refuse a model name to load that cannot name a directory of its own, with Triton's sentence."""
    problem = name_problem(name)
    if problem:
        raise InvalidArgument(f"{poll_failure(shown(name))}; the model name is not valid: {problem}")


def _check_file_name(name: str, rel: str) -> None:
    """Refuse a ``file:`` path of a load that is not a relative path of plain names."""
    if rel.startswith("/") or ".." in rel.replace("\\", "/").split("/"):
        raise InvalidArgument(f"{poll_failure(name)}: file path 'file:{_short(rel)}' leaves the model directory")
    parts = rel.split("/")
    longest = max(len(p.encode()) for p in parts)
    if longest > MAX_NAME_BYTES or len(rel.encode()) > PATH_MAX:
        # Triton tries to write the file and fails: INTERNAL (NVIDIA's simple_grpc_model_control.py expects it)
        raise InternalError(
            f"{poll_failure(name)}: file path 'file:{_short(rel)}' is too long (at most {MAX_NAME_BYTES} bytes "
            f"per name and {PATH_MAX} in all; this one has a {longest}-byte name, {len(rel.encode())} in all)"
        )
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise InvalidArgument(
                f"{poll_failure(name)}: file path 'file:{_short(rel)}' is not a file name ({problem})"
            )


def _short(rel: str) -> str:
    return rel if len(rel) <= 64 else f"{rel[:60]}..."
