"""``inferd replay CAPTURE --url ...``: send captured requests (``--capture-config``'s JSON-lines
files) to a server, compare its answers with the captured ones and its latency with theirs.

Exit status: 0 every replayed answer agrees (within ``--max-disagreement``), 1 beyond it, 2 a usage
error (no such capture, no server). Floating-point outputs agree within ``--atol`` + ``--rtol`` x
|captured|, every other datatype exactly: the shadow's rules (docs/traffic.md, "Replay").
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferd.contracts.types import InferResponse, InferTensor
from inferd.datatypes import array_from_bytes
from inferd.engine.capture import read_records
from inferd.engine.capture_config import REDACTED
from inferd.engine.shadow import compare
from inferd.tools import ToolError, require

AGREE, DISAGREE, USAGE = 0, 1, 2


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "replay",
        help="send captured requests to a server and compare its answers and latency with the captured ones",
        description="Send the requests of a capture (a file, or a directory of *.jsonl files that --capture-config "
        "wrote) to a server, compare each answer with the captured one and print agreement and latency "
        "(p50/p99 beside the captured). Exit status: 0 within tolerance, 1 beyond it, 2 a usage error.",
    )
    p.add_argument("capture", help="a capture file or directory")
    p.add_argument(
        "--url", default="localhost:8000", help="host:port (HTTP), or grpc://host:port (default: localhost:8000)"
    )
    p.add_argument("--model", default=None, help="send to this model (default: the captured one); with several "
                   "models in the capture, only that model's records are sent unless --model-from names the captured one")  # fmt: skip
    p.add_argument("--model-from", default=None, metavar="NAME", help="replay the records of captured model NAME")
    p.add_argument("--version", default=None, help="send to this version (default: what the client asked for)")
    p.add_argument("--rate", type=float, default=0.0, help="requests a second (default: 0, one after the other)")
    p.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance for floats (default: 1e-6)")
    p.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance for floats (default: 1e-5)")
    p.add_argument(
        "--max-disagreement",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="the share of replayed requests that may disagree or fail (default: 0)",
    )
    p.add_argument("--limit", type=int, default=0, help="replay at most this many records (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def _tensors(entries: list[dict[str, Any]]) -> list[InferTensor] | None:
    """Captured tensors as arrays; None when one was redacted (it cannot be sent again)."""
    out = []
    for e in entries:
        if e.get("redacted") or "data" not in e:
            return None
        shape = tuple(e["shape"])
        array = array_from_bytes(base64.b64decode(e["data"]), e["datatype"], shape)
        out.append(InferTensor(e["name"], e["datatype"], shape, array))
    return out


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


class _Client:
    """One tritonclient (HTTP or gRPC) and how to send one record with it."""

    def __init__(self, url: str) -> None:
        self.grpc = url.startswith("grpc://")
        address = url.split("://", 1)[1] if "://" in url else url
        self.module = require("tritonclient.grpc" if self.grpc else "tritonclient.http", "inferd replay")
        self.client = self.module.InferenceServerClient(address)

    def send(
        self, model: str, version: str, inputs: list[InferTensor], outputs: list[str], rid: str, params: dict[str, Any]
    ) -> InferResponse:
        m = self.module
        wire = []
        for t in inputs:
            i = m.InferInput(t.name, list(t.shape), t.datatype)
            i.set_data_from_numpy(np.asarray(t.data))
            wire.append(i)
        requested = [m.InferRequestedOutput(n) for n in outputs] or None
        result = self.client.infer(
            model, wire, model_version=version, outputs=requested, request_id=rid, parameters=params or None
        )
        response = result.get_response()
        if self.grpc:
            shown = [(o.name, o.datatype, tuple(o.shape)) for o in response.outputs]
            answered = response.model_version
        else:
            shown = [(o["name"], o["datatype"], tuple(o["shape"])) for o in response["outputs"]]
            answered = response.get("model_version", "")
        tensors = [InferTensor(n, d, s, result.as_numpy(n)) for n, d, s in shown]
        return InferResponse(model, answered, rid, tensors)

    def close(self) -> None:
        self.client.close()


def replay(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.capture)
    if not path.exists():
        raise ToolError(f"no capture at {path}")
    exception = require("tritonclient.utils", "inferd replay").InferenceServerException
    client = _Client(args.url)
    result: dict[str, Any] = {"records": 0, "replayed": 0, "agreed": 0, "disagreed": 0, "failed": 0, "skipped": {}}
    latencies: list[float] = []
    captured_latencies: list[float] = []
    worst: list[dict[str, Any]] = []
    interval = 1 / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    try:
        for record in read_records(path):
            result["records"] += 1
            if args.model_from and record.get("model") != args.model_from:
                continue
            skip = _skip_reason(record)
            inputs = _tensors(record.get("inputs", [])) if not skip else None
            captured = _tensors(record.get("outputs", [])) if not skip else None
            if not skip and (inputs is None or captured is None):
                skip = "redacted tensors"
            if skip:
                result["skipped"][skip] = result["skipped"].get(skip, 0) + 1
                continue
            assert inputs is not None and captured is not None
            if args.limit and result["replayed"] >= args.limit:
                break
            if interval:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval
            model = args.model or record["model"]
            version = args.version if args.version is not None else record.get("requested_version", "")
            params = {k: v for k, v in record.get("parameters", {}).items() if v != REDACTED}
            result["replayed"] += 1
            begin = time.perf_counter()
            try:
                answer = client.send(
                    model, version, inputs, record.get("requested_outputs") or [], record.get("id", ""), params
                )
            except exception as exc:
                result["failed"] += 1
                worst.append({"id": record.get("id", ""), "why": f"failed: {exc}"})
                continue
            latencies.append((time.perf_counter() - begin) * 1000)
            captured_latencies.append(record.get("latency_us", 0) / 1000)
            agree, diff, why = compare(
                InferResponse(model, record.get("version", ""), outputs=captured), answer, args.atol, args.rtol
            )
            if agree:
                result["agreed"] += 1
            else:
                result["disagreed"] += 1
                worst.append(
                    {"id": record.get("id", ""), "max_abs_diff": None if diff == float("inf") else diff, "why": why}
                )
    finally:
        client.close()
    n = result["replayed"]
    result["disagreement"] = round((result["disagreed"] + result["failed"]) / n, 6) if n else 0.0
    result["latency_ms"] = {"p50": _percentile(latencies, 50), "p99": _percentile(latencies, 99)}
    result["captured_latency_ms"] = {
        "p50": _percentile(captured_latencies, 50),
        "p99": _percentile(captured_latencies, 99),
    }
    result["worst"] = worst[:10]
    result["within_tolerance"] = n > 0 and result["disagreement"] <= args.max_disagreement
    return result


def _skip_reason(record: dict[str, Any]) -> str:
    if record.get("error"):
        return "captured errors"
    if not record.get("outputs"):
        return "no captured outputs"
    return ""


def _print(r: dict[str, Any]) -> None:
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(r["skipped"].items()))
    print(f"replayed {r['replayed']} of {r['records']} records" + (f" (skipped: {skipped})" if skipped else ""))
    n = r["replayed"] or 1
    print(
        f"agreement: {r['agreed']} of {r['replayed']} ({r['agreed'] / n:.2%}); disagreed {r['disagreed']}, "
        f"failed {r['failed']}"
    )
    lat, cap = r["latency_ms"], r["captured_latency_ms"]
    print(f"latency ms: p50 {lat['p50']} (captured {cap['p50']}), p99 {lat['p99']} (captured {cap['p99']})")
    for w in r["worst"]:
        print(f"  {w['id'] or '(no id)'}: {w['why']}")
    print("within tolerance" if r["within_tolerance"] else "BEYOND TOLERANCE")


def run(args: argparse.Namespace) -> int:
    try:
        result = replay(args)
    except (ToolError, ValueError) as exc:
        print(f"inferd replay: error: {exc}", file=sys.stderr)
        return USAGE
    except Exception as exc:  # the server cannot be reached: a usage error, not a disagreement
        print(f"inferd replay: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return USAGE
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return AGREE if result["within_tolerance"] else DISAGREE
