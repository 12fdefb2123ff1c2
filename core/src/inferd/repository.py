"""Scanning model repositories into snapshots and diffing two snapshots.

Both are pure: a scan reads the file tree and returns data; ``diff`` compares data. Applying a
diff (loading, swapping, unloading) is the lifecycle's job.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A model directory found in a repository, with a fingerprint of everything under it."""

    name: str
    path: Path
    repository: Path
    fingerprint: str

    def version_dirs(self) -> dict[int, Path]:
        """Numeric version directories. Like Triton, names with a leading zero are ignored."""
        out: dict[int, Path] = {}
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return out
        for entry in entries:
            name = entry.name
            if entry.is_dir() and name.isdigit() and (name == "0" or not name.startswith("0")):
                out[int(name)] = Path(entry.path)
        return out


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every model found across the repositories, plus names found more than once."""

    models: dict[str, ModelSource] = field(default_factory=dict)
    duplicates: dict[str, list[Path]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RepositoryDiff:
    added: list[str]
    removed: list[str]
    modified: list[str]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)


def fingerprint(path: Path) -> str:
    """A hash of the relative path, size and mtime of every file and directory under ``path``."""
    digest = hashlib.blake2b(digest_size=16)
    for root, dirs, files in os.walk(path):
        dirs.sort()
        rel_root = os.path.relpath(root, path)
        for name in sorted(files) + dirs:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # vanished while scanning; the next scan sees the settled tree
            digest.update(f"{rel_root}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _is_model_dir(entry: os.DirEntry[str]) -> bool:
    return entry.is_dir() and not entry.name.startswith(".") and entry.name != "__pycache__"


def scan(repositories: list[Path]) -> Snapshot:
    """Read every repository; a name found in two repositories is reported, not loaded."""
    models: dict[str, ModelSource] = {}
    seen: dict[str, list[Path]] = {}
    for repo in repositories:
        try:
            entries = sorted(os.scandir(repo), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not _is_model_dir(entry):
                continue
            path = Path(entry.path)
            seen.setdefault(entry.name, []).append(path)
            models[entry.name] = ModelSource(entry.name, path, repo, fingerprint(path))
    duplicates = {name: paths for name, paths in seen.items() if len(paths) > 1}
    for name in duplicates:
        models.pop(name, None)
    return Snapshot(models, duplicates)


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
