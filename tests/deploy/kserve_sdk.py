"""KServe's own SDK models (the `kserve` package) and the Kubernetes client models they refer to,
installed without dependencies into a cache directory and loaded without running either
package's ``__init__`` (which would import fastapi, pandas, google-auth...): only
``kserve.models`` and ``kubernetes.client.models`` are imported, and they need six and urllib3.

`Sdk.load` reads a YAML document into those classes strictly, by the models' own
``openapi_types`` / ``attribute_map``: an unknown field, a wrong type or a missing required field
raises `ManifestError` naming its path (the SDK's own ``ApiClient.deserialize`` ignores unknown
fields, so it cannot catch a typo). `Sdk.dump` turns the objects back into plain data."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The KServe release whose CRD models the manifests are checked against, and the Kubernetes
#: client its models name (V1Container, V1ObjectMeta...): the last one generated in the same style.
KSERVE_VERSION = "0.21.0"
KUBERNETES_CLIENT_VERSION = "35.0.0"
#: What pip installs (``--require-hashes``: the wheels PyPI served when these pins were chosen).
REQUIREMENTS = (
    f"kserve=={KSERVE_VERSION} --hash=sha256:df9bc5888704d9085015e08f1a8fced5ff0698f3becc6212d4e7b8234c71623b",
    f"kubernetes=={KUBERNETES_CLIENT_VERSION}"
    " --hash=sha256:39e2b33b46e5834ef6c3985ebfe2047ab39135d41de51ce7641a7ca5b372a13d",
)

_PRIMITIVES: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float), "bool": bool}
_LIST = re.compile(r"list\[(.+)\]")
_DICT = re.compile(r"dict\(str, (.+)\)")
#: The packages whose ``__init__`` is skipped: each is a bare namespace over its directory.
_STUBS = {"kserve": "kserve", "kubernetes": "kubernetes", "kubernetes.client": "kubernetes/client"}


class ManifestError(ValueError):
    """A document that KServe's models do not accept as it is."""


def install(target: Path) -> Path:
    """``pip install --no-deps --target`` the two packages under ``target`` once; the directory
    to load from. A failed download raises with pip's own message."""
    site, requirements, done = target / "site", target / "requirements.txt", target / "installed"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if done.exists() and done.read_text() == wanted:
        return site
    requirements.write_text(wanted)
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps",
           "--only-binary=:all:", "--require-hashes", "--upgrade", "--target", str(site),
           "-r", str(requirements)]  # fmt: skip
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"`{' '.join(cmd)}` took over {exc.timeout:.0f} s") from exc
    if out.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({out.returncode}):\n{out.stderr[-2000:]}")
    done.write_text(wanted)
    return site


@dataclass(frozen=True)
class Sdk:
    """The model modules: KServe's (V1alpha1*, V1beta1*) and Kubernetes' (V1*)."""

    kserve: types.ModuleType
    kubernetes: types.ModuleType

    @classmethod
    def from_site(cls, site: Path) -> Sdk:
        """Import both model packages from ``site`` under stub parents, then take every module
        they added back out of ``sys.modules`` (so nothing else sees a half-imported package)."""
        saved = {k: v for k, v in sys.modules.items() if _is_ours(k)}
        try:
            for name, rel in _STUBS.items():
                stub = types.ModuleType(name)
                stub.__path__ = [str(site / rel)]
                sys.modules[name] = stub
            return cls(importlib.import_module("kserve.models"), importlib.import_module("kubernetes.client.models"))
        finally:
            for name in [k for k in sys.modules if _is_ours(k)]:
                del sys.modules[name]
            sys.modules.update(saved)

    def model_class(self, name: str) -> type:
        found = getattr(self.kserve, name, None) or getattr(self.kubernetes, name, None)
        if not isinstance(found, type):
            raise ManifestError(f"no model class {name!r} in kserve {KSERVE_VERSION}")
        return found

    def document_type(self, doc: dict[str, Any]) -> str:
        """The model class of a document: ``serving.kserve.io/v1alpha1`` + ``ServingRuntime`` ->
        ``V1alpha1ServingRuntime``."""
        return doc["apiVersion"].split("/")[-1].capitalize() + doc["kind"]

    def load(self, data: Any, type_name: str, path: str = "$") -> Any:
        """``data`` as an instance of ``type_name`` (an ``openapi_types`` string), strictly."""
        if m := _LIST.fullmatch(type_name):
            _expect(data, list, type_name, path)
            return [self.load(v, m[1], f"{path}[{i}]") for i, v in enumerate(data)]
        if m := _DICT.fullmatch(type_name):
            _expect(data, dict, type_name, path)
            return {_key(k, path): self.load(v, m[1], f"{path}.{k}") for k, v in data.items()}
        if type_name == "object":  # IntOrString, RawExtension: any JSON value
            return data
        if type_name in _PRIMITIVES:
            _expect(data, _PRIMITIVES[type_name], type_name, path)
            return data
        return self._load_model(data, self.model_class(type_name), path)

    def _load_model(self, data: Any, cls: type, path: str) -> Any:
        _expect(data, dict, cls.__name__, path)
        attrs = {key: attr for attr, key in cls.attribute_map.items()}
        unknown = sorted(set(data) - set(attrs))
        if unknown:
            raise ManifestError(f"{path}: unknown field(s) {unknown} for {cls.__name__}")
        kwargs = {attrs[k]: self.load(v, cls.openapi_types[attrs[k]], f"{path}.{k}") for k, v in data.items()}
        try:
            return cls(**kwargs)
        except ValueError as exc:  # the model's own check: a required field, an enum value
            raise ManifestError(f"{path}: {cls.__name__}: {exc}") from exc

    def dump(self, value: Any) -> Any:
        """Plain data again, with the manifest's field names. A field left at its constructor's
        default (None, or '' for V1beta1ModelSpec.name) is what the model holds when the document
        did not set it, so it is left out."""
        if isinstance(value, list):
            return [self.dump(v) for v in value]
        if isinstance(value, dict):
            return {k: self.dump(v) for k, v in value.items()}
        if hasattr(type(value), "attribute_map"):
            defaults = _defaults(type(value))
            fields = (
                (key, getattr(value, attr), defaults.get(attr)) for attr, key in type(value).attribute_map.items()
            )
            return {key: self.dump(v) for key, v, default in fields if v is not None and v != default}
        return value


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values()}


def _is_ours(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in ("kserve", "kubernetes"))


def _expect(data: Any, kind: type | tuple[type, ...], type_name: str, path: str) -> None:
    if not isinstance(data, kind) or (isinstance(data, bool) and kind is not bool):
        raise ManifestError(f"{path}: expected {type_name}, got {type(data).__name__} {data!r}")


def _key(key: Any, path: str) -> str:
    _expect(key, str, "str", f"{path} (a key)")
    return key
