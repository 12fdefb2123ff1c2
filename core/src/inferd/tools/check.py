"""``inferd check REPO...``: every model of one or more repositories parsed, auto-completed and
validated offline, by the server's own code, so the messages are the ones the repository index
would show. Nothing is loaded (no instance is created, no model runs), so what only a load finds
(a model file that does not open, a ``model.py`` whose ``initialize`` raises) is not found here.

Exit status 0 when every model passes, 1 when one does not (or a repository cannot be read), 2 for
a usage error. ``--json`` prints one object for CI.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferd import config as cfg
from inferd.contracts.errors import InferdError, NotFound
from inferd.host.arguments import backend_config_setting
from inferd.host.plugins import PluginHost
from inferd.lifecycle.builder import VersionBuilder
from inferd.lifecycle.manager import failure_reason, prepare
from inferd.repository.scan import ModelSource, Snapshot, scan


@dataclass
class Checked:
    """One model's verdict: its backend and the versions it would load, or why it would not."""

    name: str
    ok: bool
    backend: str = ""
    versions: list[int] = field(default_factory=list)
    error: str = ""
    #: What checking it logged at WARNING or above (an auto-completed guess, a setting ignored).
    warnings: list[str] = field(default_factory=list)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "check",
        help="validate model repositories offline (parse, auto-complete, validate every model)",
        description="Parse, auto-complete and validate every model of the repositories as 'inferd serve' would, "
        "without loading them; exit 1 when a model has an error.",
    )
    p.add_argument("repositories", nargs="+", metavar="REPO", help="a model repository directory (one or more)")
    p.add_argument(
        "--model-config-name",
        default=None,
        metavar="NAME",
        help="use <model>/configs/NAME.pbtxt where present instead of config.pbtxt",
    )
    p.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not let backends complete missing config fields (as the serve flag)",
    )
    p.add_argument(
        "--backend-config",
        action="append",
        default=[],
        type=backend_config_setting,
        metavar="[BACKEND,]KEY=VALUE",
        help="a backend setting, as for 'inferd serve' (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for CI)")
    return p


class _Offline:
    """What an ensemble's checks ask of the server, answered from the models checked so far."""

    def __init__(self, snapshot: Snapshot, configs: dict[str, cfg.ModelConfig]) -> None:
        self.snapshot = snapshot
        self.configs = configs

    def step_key(self, namespace: str, name: str) -> str:
        """A step's model key: its name (the check scans without namespacing)."""
        return name

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        if name not in self.configs:
            raise NotFound(f"model '{name}' is not available")
        return self.configs[name]

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return [{"name": n} for n in self.snapshot.models]


def check(
    repositories: Sequence[Path],
    config_name: str | None = None,
    autocomplete: bool = True,
    backend_config: dict[str, dict[str, str]] | None = None,
    host: PluginHost | None = None,
) -> list[Checked]:
    """Every model of ``repositories``, by name (a missing repository is an error, as at start-up)."""
    results = [
        Checked(str(r), False, error=f"Internal - failed to stat file {r} (model repository)")
        for r in repositories
        if not r.is_dir()
    ]
    registries = (host or PluginHost()).registries()
    # The builder's model caller is only for loaded models (ensembles, BLS): nothing loads here.
    builder = VersionBuilder(
        registries.backends,
        registries.schedulers,
        None,  # type: ignore[arg-type]
        autocomplete=autocomplete,
        backend_config=backend_config,
    )
    snapshot = scan([r.resolve() for r in repositories if r.is_dir()], config_name)
    for name, paths in sorted(snapshot.duplicates.items()):
        results.append(
            Checked(
                name, False, error=f"model '{name}' exists in more than one repository: {', '.join(map(str, paths))}"
            )
        )
    configs: dict[str, cfg.ModelConfig] = {}
    ensembles: list[tuple[Checked, cfg.ModelConfig]] = []
    for name, source in sorted(snapshot.models.items()):
        with _warnings() as logged:
            checked, config = _check_one(builder, source)
        checked.warnings = logged
        if config is not None:
            configs[name] = config
            if not checked.backend:
                ensembles.append((checked, config))
        results.append(checked)
    for checked, config in ensembles:  # after every model: the steps' configs are known
        _bind_ensemble(checked, config, _Offline(snapshot, configs))
    return sorted(results, key=lambda c: c.name)


def _check_one(builder: VersionBuilder, source: ModelSource) -> tuple[Checked, cfg.ModelConfig | None]:
    """The verdict on one model, and its completed config when it has one."""
    try:
        config, backend, chosen = prepare(builder, source)
    except Exception as exc:  # anything a load would report
        return Checked(source.name, False, error=failure_reason(exc)), None
    return Checked(source.name, True, backend.name if backend is not None else "", chosen), config


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@contextmanager
def _warnings() -> Iterator[list[str]]:
    """The warnings logged meanwhile, kept for the model's row instead of printed bare on stderr."""
    logged: list[str] = []
    root = logging.getLogger()
    handler = _Collect(logged)
    root.addHandler(handler)
    try:
        yield logged
    finally:
        root.removeHandler(handler)


def _bind_ensemble(checked: Checked, config: cfg.ModelConfig, models: _Offline) -> None:
    from inferd.schedulers.ensemble.plan import Plan

    checked.backend = "ensemble"
    try:
        Plan.from_config(config).bind(config, models)  # type: ignore[arg-type]
    except InferdError as exc:
        checked.ok, checked.error, checked.versions = False, exc.message, []


def run(args: argparse.Namespace) -> int:
    settings: dict[str, dict[str, str]] = {}
    for backend, key, value in args.backend_config:
        settings.setdefault(backend, {})[key] = value
    results = check(
        [Path(r) for r in args.repositories], args.model_config_name, not args.disable_auto_complete_config, settings
    )
    failed = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps({"models": [asdict(r) for r in results], "errors": len(failed)}, indent=2))
    else:
        width = max([len(r.name) for r in results] + [5])
        for r in results:
            detail = f"{r.backend or 'ensemble'}, versions {r.versions}" if r.ok else r.error
            print(f"{r.name:<{width}}  {'OK' if r.ok else 'ERROR':<5}  {detail}")
            for warning in r.warnings:
                print(f"{'':<{width}}  {'':<5}  warning: {warning}")
        print(f"{len(results)} model(s) checked, {len(failed)} with errors")
    return 1 if failed else 0
