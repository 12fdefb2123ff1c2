"""Custom resources checked against their CRDs' published schemas, offline: the schemas are vendored
under ``tests/fixtures/crds/`` (see the README there) and read with ``jsonschema``.

A CRD's structural schema prunes (the API server refuses, with ``kubectl --validate=strict``) any
field it does not declare, unless an object says ``x-kubernetes-preserve-unknown-fields``; so
every other object schema with declared properties is closed here (``additionalProperties:
false``), and a typo fails as it would on a cluster. CEL rules (``x-kubernetes-validations``) are
not evaluated; the tests check what they say by hand where it matters."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "crds"
INFERENCE_POOL = "inference.networking.k8s.io_inferencepools.v1.json.gz"
LLM_INFERENCE_SERVICE = "serving.kserve.io_llminferenceservices.v1alpha2.json.gz"


def _closed(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate(doc: dict[str, Any], fixture: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``doc`` is a valid object of the CRD in ``fixture``."""
    crd = json.loads(gzip.decompress((FIXTURES / fixture).read_bytes()))
    assert doc["apiVersion"] == f"{crd['group']}/{crd['version']}", doc["apiVersion"]
    assert doc["kind"] == crd["kind"], doc["kind"]
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    schema = _closed(crd["openAPIV3Schema"])
    schema["properties"] = {
        k: v for k, v in schema["properties"].items() if k not in ("apiVersion", "kind", "metadata")
    }
    jsonschema.validate(body, schema, cls=jsonschema.Draft4Validator)


def vendor(crd_yaml: Path, version: str, out: Path) -> None:
    """Write ``version``'s schema of the CRD in ``crd_yaml`` to ``out`` as the fixtures hold them."""
    import yaml

    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "description"}
        return [strip(v) for v in o] if isinstance(o, list) else o

    crd = yaml.safe_load(crd_yaml.read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    doc = {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": version,
           "openAPIV3Schema": strip(served["schema"]["openAPIV3Schema"])}  # fmt: skip
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode())


if __name__ == "__main__":
    vendor(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
