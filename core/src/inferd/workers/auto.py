"""``--workers auto`` (the default): how many serving processes to run, and why.

One process runs inferd's own request work on one core at a time (the GIL), so the default is a
worker per core the process may use, as Triton's one C++ process uses every core. Each worker
loads every model, so the choice falls back to one process, saying why, when the models the
server starts with hold something that must not be held once per process or that one process
must keep to itself:

- a model whose backend registered ``single_process=True`` (an engine that owns a device or
  holds a KV cache sized to the device's memory: vLLM, TensorRT);
- a model with GPU instances (``KIND_GPU``, or ``KIND_AUTO`` where GPUs are visible): the
  device memory would be held once per worker;
- a model with ``sequence_batching``: a sequence's requests must reach the process that holds
  its state, and clients that spread a sequence over connections would reach another;
- per-tenant limits in ``--auth-config`` (rate, concurrency, tokens per minute): each worker
  counts its own, so N workers would let N times the file's numbers through;
- models whose files would not fit in memory once per worker (N is lowered to what fits in
  half of the available memory).

The models looked at are those of the local repositories at start, every one of them in explicit
mode too (any may be loaded later); a remote (``s3://``) repository's are not read before serving,
and a model added to a repository later does not change the count. The start-up block says what
was chosen and why; ``--workers N`` sets the count outright.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from inferd.config import ModelConfig, backend_for
from inferd.config.model_config_pb2 import ModelInstanceGroup
from inferd.contracts.backend import Backend
from inferd.contracts.registry import Registry
from inferd.lifecycle.builder import visible_gpus
from inferd.repository.scan import read_config

#: What ``--workers`` takes besides a whole number.
AUTO = "auto"

_GPU = ModelInstanceGroup.Kind.Value("KIND_GPU")
_AUTO_KIND = ModelInstanceGroup.Kind.Value("KIND_AUTO")

#: The share of the available memory N copies of the models' files may take.
MEMORY_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class WorkerChoice:
    """How many serving processes ``--workers auto`` runs, and the reason shown at start."""

    count: int
    reason: str

    def describe(self) -> str:
        """The start-up block's line: ``2 (auto: 2 usable cores)``."""
        return f"{self.count} (auto: {self.reason})"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, lowered by a cgroup CPU quota
    (a container's ``cpu.max`` or ``cpu.cfs_quota_us``: a Kubernetes CPU limit), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs a cgroup quota allows (quota / period), or None without a quota."""
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1: -1 means none
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    """``MemAvailable`` in bytes, lowered by a cgroup memory limit; None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    try:
        limit = (Path("/sys/fs/cgroup") / "memory.max").read_text().strip()
        if limit != "max":
            available = min(available, int(limit))
    except (OSError, ValueError):
        pass
    return available


@dataclass(frozen=True, slots=True)
class RepositoryModel:
    """A model of a local repository: its name, directory, parsed config (None: unreadable) and
    whether the server loads it at start."""

    name: str
    path: Path
    config: ModelConfig | None
    loads_at_start: bool = True


def repository_models(
    repositories: Sequence[Path | str], explicit: bool, load_models: Sequence[str], config_name: str | None
) -> Iterator[RepositoryModel]:
    """Every model a local repository holds, marked with whether the server loads it at start
    (explicit mode: those ``--load-model`` names, ``*`` for all); remote repositories are skipped."""
    wanted = set(load_models)
    every = not explicit or "*" in wanted
    for repo in repositories:
        if "://" in str(repo):
            continue
        try:
            entries = sorted(os.scandir(repo), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir() or entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            config, _ = read_config(Path(entry.path), config_name)
            yield RepositoryModel(entry.name, Path(entry.path), config, every or entry.name in wanted)


def choose(
    models: Iterable[RepositoryModel],
    backends: Registry[Backend],
    tenant_limits: bool,
    cores: int | None = None,
    memory: int | None = None,
    gpus: Sequence[int] | None = None,
) -> WorkerChoice:
    """The worker count for a repository of ``models`` on a machine of ``cores`` usable cores
    (by default measured) with ``memory`` bytes available and ``gpus`` visible. Every model is
    looked at for what keeps the server to one process (explicit mode may load any of them
    later); only those loaded at start count towards memory."""
    cores = usable_cores() if cores is None else cores
    if cores <= 1:
        return WorkerChoice(1, "1 usable core")
    if tenant_limits:
        return WorkerChoice(1, "--auth-config sets per-tenant limits, which each worker would count on its own")
    gpus = visible_gpus() if gpus is None else gpus
    model_bytes = 0
    for model in models:
        reason = _single_process_reason(model, backends, bool(gpus))
        if reason:
            return WorkerChoice(1, reason)
        if model.loads_at_start:
            model_bytes += _files_size(model.path)
    memory = available_memory() if memory is None else memory
    count = cores
    if memory is not None and model_bytes > 0:
        fits = int(memory * MEMORY_SHARE // model_bytes)
        if fits < count:
            gib = model_bytes / 2**30
            return WorkerChoice(
                max(1, fits),
                f"{cores} usable cores, but the models' files ({gib:.1f} GiB) fit in memory "
                f"{max(1, fits)} time(s) over",
            )
    return WorkerChoice(count, f"{cores} usable cores")


def _single_process_reason(model: RepositoryModel, backends: Registry[Backend], gpus_visible: bool) -> str:
    config = model.config
    if config is None:
        return ""
    backend = backend_for(config) or _declared_backend(model, backends)
    if backend in backends and backends.get(backend).options.get("single_process"):
        return f"model '{model.name}' runs on backend '{backend}', which keeps one engine per process"
    kinds = {group.kind for group in config.instance_group}
    if _GPU in kinds or (gpus_visible and (not kinds or _AUTO_KIND in kinds)):
        return f"model '{model.name}' has GPU instances, whose memory each worker would hold again"
    if config.HasField("sequence_batching"):
        return f"model '{model.name}' batches sequences, whose requests must all reach one process"
    return ""


def _declared_backend(model: RepositoryModel, backends: Registry[Backend]) -> str:
    """The backend whose declared model file a config-less model holds ("" for none)."""
    try:
        versions = [Path(e.path) for e in os.scandir(model.path) if e.is_dir() and e.name.isdigit()]
    except OSError:
        return ""
    for reg in backends:
        names = cast("Iterable[str]", reg.options.get("model_filenames") or ())
        if any((d / name).exists() for d in versions for name in names):
            return reg.name
    return ""


def _files_size(path: Path) -> int:
    """The bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
    return total
