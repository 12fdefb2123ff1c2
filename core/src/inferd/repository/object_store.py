"""Model repositories in S3-compatible object storage, mirrored into a local cache directory.

Triton spells them ``s3://bucket/path``, ``s3://host:port/bucket/path`` (an S3-compatible store
spoken to over HTTP) and ``s3://https://host:port/bucket/path``. Credentials come from boto3's
default chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, the files
under ``~/.aws``, instance roles). Each sync lists the objects once; a model whose objects (keys,
ETags, sizes) changed since the last sync is downloaded whole into a fresh local directory, so a
model being served never sees its files change under it: the lifecycle loads the new directory
and swaps, as it does for a local repository. A store that cannot be read keeps the last listing
that could (the models keep serving) and says why in :attr:`ObjectStoreRepository.error`.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferd.repository.names import inside, name_problem

log = logging.getLogger(__name__)

#: Superseded local copies of a model kept besides the newest (a reload may still be building
#: from one, or the old version still draining from it).
_KEEP_GENERATIONS = 2
_ENDPOINT = re.compile(r"^(?P<scheme>https?://)?(?P<host>[0-9A-Za-z.\-]+):(?P<port>[0-9]+)$")


def is_url(repository: str | os.PathLike[str]) -> bool:
    """Whether a ``--model-repository`` value names object storage rather than a directory."""
    return "://" in str(repository)


class _Pages(Protocol):
    def paginate(self, *, Bucket: str, Prefix: str) -> Iterable[dict[str, list[dict[str, str | int]]]]: ...


class S3Client(Protocol):
    """The calls of a boto3 S3 client that a repository makes."""

    def get_paginator(self, operation_name: str) -> _Pages: ...

    def download_file(self, Bucket: str, Key: str, Filename: str) -> None: ...


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where an ``s3://`` repository lives: the endpoint (``None`` for AWS), bucket and prefix."""

    url: str
    endpoint: str | None
    bucket: str
    #: The key prefix of the repository, "" or ending in "/".
    prefix: str


def parse_s3_url(url: str) -> S3Location:
    """Split an ``s3://`` URL as Triton does; a ``host:port`` first segment is an endpoint
    (HTTP unless it is written ``https://host:port``). Raises ``ValueError`` naming the URL."""
    if not url.startswith("s3://"):
        scheme = url.split("://", 1)[0]
        raise ValueError(f"model repository '{url}': unsupported scheme '{scheme}://' (inferd reads s3:// URLs)")
    rest = url[len("s3://") :]
    scheme = ""
    for prefix in ("http://", "https://"):
        if rest.startswith(prefix):
            scheme, rest = prefix, rest[len(prefix) :]
    first, _, rest = rest.lstrip("/").partition("/")
    endpoint = None
    match = _ENDPOINT.match(scheme + first)
    if match:
        endpoint = f"{match['scheme'] or 'http://'}{match['host']}:{match['port']}"
        first, _, rest = rest.partition("/")
    elif scheme:
        raise ValueError(f"model repository '{url}': '{scheme}' must be followed by host:port")
    if not first:
        raise ValueError(f"model repository '{url}': no bucket name (expected s3://[host:port/]bucket/path)")
    prefix = "/".join(p for p in rest.split("/") if p)
    return S3Location(url, endpoint, first, prefix + "/" if prefix else "")


def _client(location: S3Location) -> S3Client:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise RuntimeError(
            f"model repository '{location.url}': reading s3:// repositories needs boto3; "
            "install the extra: pip install 'inferd[s3]'"
        ) from None
    config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    return boto3.session.Session().client("s3", endpoint_url=location.endpoint, config=config)


@dataclass(frozen=True, slots=True)
class _Object:
    key: str
    rel: str
    etag: str
    size: int


class ObjectStoreRepository:
    """An ``s3://`` model repository and its local mirror (one folder per process)."""

    def __init__(self, url: str, cache_root: Path | None = None) -> None:
        self.location = parse_s3_url(url)
        self.url = url
        self._client = _client(self.location)
        base = cache_root or os.environ.get("TRITON_AWS_MOUNT_DIRECTORY") or None
        self.root = Path(tempfile.mkdtemp(prefix="inferd-s3-", dir=base))
        #: Why the last sync could not read the store ("" when it could).
        self.error = ""
        self._models: dict[str, tuple[Path, str]] = {}
        self._generations: dict[str, collections.deque[Path]] = {}
        self._lock = threading.Lock()  # one sync at a time (two load requests may both rescan)

    def __repr__(self) -> str:
        return self.url

    def sync(self) -> dict[str, tuple[Path, str]]:
        """Each model's local directory and fingerprint, downloading what changed (blocking).

        When the store cannot be read, the last listing that could stands and :attr:`error`
        says why (logged once per new reason); the next sync tries again.
        """
        with self._lock:
            try:
                models = self._sync()
            except Exception as exc:
                self._failed(exc)
                return dict(self._models)
            if self.error:
                log.info("model repository '%s' can be read again", self.url)
            self.error = ""
            self._models = models
            return dict(models)

    def _failed(self, exc: Exception) -> None:
        error = f"failed to poll model repository '{self.url}': {describe(exc)}"
        if error != self.error:
            log.error("%s; the models it held keep serving", error)
        self.error = error

    def check(self) -> None:
        """Read the store once (blocking); raise ``RuntimeError`` naming the URL if it cannot."""
        self.sync()
        if self.error:
            raise RuntimeError(self.error)

    def close(self) -> None:
        """Delete the local mirror (blocking)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def _sync(self) -> dict[str, tuple[Path, str]]:
        by_model: dict[str, list[_Object]] = {}
        for obj in self._list():
            name, _, rel = obj.rel.partition("/")
            if rel and not name.startswith(".") and name != "__pycache__":
                by_model.setdefault(name, []).append(obj)
        models: dict[str, tuple[Path, str]] = {}
        for name, objects in sorted(by_model.items()):
            stamp = _fingerprint(objects)
            old = self._models.get(name)
            models[name] = old if old is not None and old[1] == stamp else (self._download(name, stamp, objects), stamp)
        return models

    def _list(self) -> list[_Object]:
        location = self.location
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=location.prefix)
        out = []
        for page in pages:
            for item in page.get("Contents", ()):
                key = str(item["Key"])
                rel = key[len(location.prefix) :]
                if not key.endswith("/") and _safe(rel):
                    out.append(_Object(key, rel, str(item.get("ETag", "")), int(item.get("Size", 0))))
        return out

    def _download(self, name: str, stamp: str, objects: list[_Object]) -> Path:
        """Every object of model ``name`` into a fresh directory, renamed into place when whole."""
        final = self.root / name / stamp
        if not final.is_dir():
            final.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{stamp}-", dir=final.parent))
            try:
                for obj in objects:
                    dest = inside(partial, partial / obj.rel)  # "<name>/..."
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    self._client.download_file(self.location.bucket, obj.key, str(dest))
                partial.rename(final)
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            log.info("model '%s': downloaded %d objects from '%s'", name, len(objects), self.url)
        self._retire_old(name, final)
        return final / name

    def _retire_old(self, name: str, newest: Path) -> None:
        generations = self._generations.setdefault(name, collections.deque())
        if newest in generations:
            generations.remove(newest)
        generations.append(newest)
        while len(generations) > _KEEP_GENERATIONS + 1:
            shutil.rmtree(generations.popleft(), ignore_errors=True)


def _safe(rel: str) -> bool:
    """Whether an object's key (below the prefix) can be a file under the mirror: names only
    (``inferd.repository.names``), so no '..', no empty or absolute path, no backslash or control character."""
    return not any(name_problem(part) for part in rel.split("/"))


def _fingerprint(objects: list[_Object]) -> str:
    digest = hashlib.blake2b(digest_size=12)
    for obj in sorted(objects, key=lambda o: o.rel):
        digest.update(f"{obj.rel}\0{obj.etag}\0{obj.size}\n".encode())
    return digest.hexdigest()


def describe(exc: BaseException) -> str:
    """A short reason for a failed S3 call: the service's error code and message when it gave one."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        code, message = error.get("Code", ""), error.get("Message", "")
        return f"{code}: {message}" if message and message != code else str(code or exc)
    return f"{type(exc).__name__}: {exc}"
