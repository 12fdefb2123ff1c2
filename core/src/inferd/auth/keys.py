"""The ``--auth-config`` file: API keys (sha256 hex of the key) -> tenants, and each tenant's
rights and limits. Read at start-up and again when its mtime changes (checked at most once per
:data:`CHECK_SECONDS`); a file that no longer parses keeps the keys that were in force."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.auth.groups import ApiGroup, RestrictionError, parse_group

log = logging.getLogger("inferd.auth")

CHECK_SECONDS = 1.0
#: What a tenant may use when its entry names no ``apis``: no administration.
DEFAULT_APIS = frozenset(
    {ApiGroup.HEALTH, ApiGroup.METADATA, ApiGroup.INFERENCE, ApiGroup.MODEL_CONFIG, ApiGroup.STATISTICS}
)
_HEX = re.compile(r"(?:sha256:)?([0-9a-fA-F]{64})")
_TENANT_FIELDS = {
    "keys",
    "models",
    "apis",
    "rate",
    "burst",
    "concurrency",
    "priority",
    "queue_timeout_ms",
    "max_prompt_tokens",
    "tokens_per_minute",
}


class AuthConfigError(ValueError):
    """A malformed auth config: the message names the file, and the line where it can."""


@dataclass(frozen=True)
class Tenant:
    """One tenant: the models it may see (glob patterns), its API groups and its limits."""

    name: str
    models: tuple[str, ...] = ("*",)
    apis: frozenset[ApiGroup] = DEFAULT_APIS
    rate: float | None = None
    burst: float | None = None
    concurrency: int | None = None
    #: Batcher priority level (1 highest, as Triton's); None: the model's default level.
    priority: int | None = None
    #: Default queue timeout of the tenant's requests, in microseconds (0: none).
    queue_timeout_us: int = 0
    #: Most prompt tokens one request may carry (None: no limit; checked where the prompt is tokenized).
    max_prompt_tokens: int | None = None
    #: Tokens (prompt + completion) the tenant may spend a minute (None: no limit).
    tokens_per_minute: int | None = None
    _seen: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def sees(self, model: str) -> bool:
        """Whether ``model`` matches one of the tenant's patterns (remembered per name)."""
        seen = self._seen.get(model)
        if seen is None:
            seen = any(fnmatch.fnmatchcase(model, p) for p in self.models)
            if len(self._seen) < 4096:
                self._seen[model] = seen
        return seen


@dataclass(frozen=True)
class AuthConfig:
    """The parsed file: key digest -> tenant, and whether health stays open without a key."""

    tenants: dict[str, Tenant]
    by_digest: dict[str, Tenant]
    open_health: bool = True


def digest(key: str) -> str:
    """The sha256 hex digest a key is stored as."""
    return hashlib.sha256(key.encode()).hexdigest()


def _parse_text(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise AuthConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 1
        raise AuthConfigError(f"{path}:{line}: not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise AuthConfigError(f"{path}: not valid YAML: {exc}") from None


def _line_of(text: str, name: str) -> int:
    """The line where mapping key ``name`` is written (YAML or JSON), else 1."""
    pattern = re.compile(r"""(?:^|[{,\s])["']?""" + re.escape(name) + r"""["']?\s*:""")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return number
    return 1


def _number(entry: dict[str, Any], name: str, where: str) -> float | None:
    value = entry.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise AuthConfigError(f"{where}: '{name}' must be a number > 0, got {value!r}")
    return float(value)


def _integer(entry: dict[str, Any], name: str, tenant: str, where: str) -> int | None:
    """A whole number >= 1 (``priority``, token limits), or None when absent."""
    value = entry.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AuthConfigError(f"{where}: tenant '{tenant}': '{name}' must be an integer >= 1, got {value!r}")
    return value


def _tenant(name: str, entry: Any, where: str) -> tuple[Tenant, list[str]]:
    if not isinstance(entry, dict):
        raise AuthConfigError(f"{where}: tenant '{name}' must be a mapping with 'keys'")
    unknown = sorted(set(entry) - _TENANT_FIELDS)
    if unknown:
        raise AuthConfigError(
            f"{where}: tenant '{name}': unknown field '{unknown[0]}' (fields: {', '.join(sorted(_TENANT_FIELDS))})"
        )
    keys, models, apis = entry.get("keys"), entry.get("models", ["*"]), entry.get("apis")
    if not isinstance(keys, list) or not keys:
        raise AuthConfigError(f"{where}: tenant '{name}': 'keys' must be a list of sha256 hex digests")
    digests = []
    for key in keys:
        match = _HEX.fullmatch(str(key).strip())
        if match is None:
            raise AuthConfigError(
                f"{where}: tenant '{name}': key '{str(key)[:12]}...' is not a sha256 hex digest "
                "(store sha256(key), e.g. printf %s KEY | sha256sum)"
            )
        digests.append(match.group(1).lower())
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise AuthConfigError(f"{where}: tenant '{name}': 'models' must be a list of glob patterns")
    try:
        groups = DEFAULT_APIS if apis is None else frozenset(parse_group(str(a)) for a in apis)
    except RestrictionError as exc:
        raise AuthConfigError(f"{where}: tenant '{name}': {exc}") from None
    rate, burst, limit = (_number(entry, n, where) for n in ("rate", "burst", "concurrency"))
    concurrency = None if limit is None else int(limit)
    priority, prompt_limit, per_minute = (
        _integer(entry, n, name, where) for n in ("priority", "max_prompt_tokens", "tokens_per_minute")
    )
    timeout = entry.get("queue_timeout_ms")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise AuthConfigError(f"{where}: tenant '{name}': 'queue_timeout_ms' must be a number > 0, got {timeout!r}")
    timeout_us = 0 if timeout is None else max(1, round(timeout * 1000))
    return Tenant(
        name, tuple(models), groups, rate, burst, concurrency, priority, timeout_us, prompt_limit, per_minute
    ), digests


def parse_config(path: Path, text: str) -> AuthConfig:
    """The config in ``text`` (JSON for ``.json``, YAML otherwise), or :class:`AuthConfigError`."""
    data = _parse_text(path, text)
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), dict):
        raise AuthConfigError(f"{path}:1: expected a mapping with 'tenants: {{<name>: {{keys: [...]}}}}'")
    open_health = data.get("open_health", True)
    if not isinstance(open_health, bool):
        raise AuthConfigError(f"{path}:{_line_of(text, 'open_health')}: 'open_health' must be true or false")
    tenants: dict[str, Tenant] = {}
    by_digest: dict[str, Tenant] = {}
    for name, entry in data["tenants"].items():
        where = f"{path}:{_line_of(text, str(name))}"
        tenant, digests = _tenant(str(name), entry, where)
        tenants[tenant.name] = tenant
        for d in digests:
            if d in by_digest:
                raise AuthConfigError(f"{where}: tenant '{name}': a key is also tenant '{by_digest[d].name}''s")
            by_digest[d] = tenant
    return AuthConfig(tenants, by_digest, open_health)


def load_config(path: Path) -> AuthConfig:
    """Read and parse ``path``; :class:`AuthConfigError` names the file (and line) when it is bad."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthConfigError(f"{path}: cannot read the auth config: {exc}") from None
    return parse_config(path, text)


class KeyFile:
    """The auth config of one file, re-read when its mtime changes (old keys kept on an error)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = self._stat()
        self.config = load_config(path)
        self._checked = time.monotonic()

    def _stat(self) -> int:
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return -1

    def current(self) -> AuthConfig:
        """The config in force, re-read first when the file changed since the last look."""
        now = time.monotonic()
        if now - self._checked >= CHECK_SECONDS:
            self._checked = now
            self.reload_if_changed()
        return self.config

    def reload_if_changed(self) -> bool:
        """Re-read the file if its mtime changed; True when new keys are in force."""
        mtime = self._stat()
        if mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            self.config = load_config(self.path)
        except AuthConfigError as exc:
            log.error("auth config not reloaded, the previous keys stay in force: %s", exc)
            return False
        log.info("auth config %s reloaded: %d tenant(s)", self.path, len(self.config.tenants))
        return True
