"""Shadow traffic: a copy of a share of a model's live requests run on a candidate version that
answers nobody, its outputs compared with the serving version's (docs/traffic.md, "Shadow traffic").

The router hands a request to :meth:`Shadow.offer` once the serving version answered it; the copy
runs as a task on the event loop, after the client's answer, bounded by ``shadow_queue`` copies in
flight (beyond that a copy is dropped and counted). :func:`compare` judges each pair: exact for
integer, BOOL and BYTES tensors, within ``shadow_atol`` + ``shadow_rtol`` x |serving| for floating
point. :class:`ShadowPolicy` decides when the shadow has shown enough: it advances into the canary
stages (:mod:`inferd.engine.traffic`) or is held at the shadow stage with its disagreement reported.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.config.parameters import ModelParameters
from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferResponse

#: Floating-point datatypes: compared within the tolerance; every other one exactly.
FLOATS = frozenset(("FP16", "FP32", "FP64"))
#: The upper bounds of the ``inferd_shadow_max_abs_diff`` histogram's buckets (the last is +Inf).
DIFF_BUCKETS = (0.0, 1e-9, 1e-6, 1e-4, 1e-2, 1.0, math.inf)
#: Worst disagreements kept per shadow (GET .../traffic shows them with their request ids).
KEEP_WORST = 5
#: Shadow states: copying and comparing; held (it disagreed: it never leaves the shadow stage).
SHADOW, HELD = "shadow", "held at shadow"


def parse_shadow(text: str, model: str) -> tuple[int, float] | None:
    """``"2"`` or ``"2:25"`` (version, percent of the serving answers copied; 100 when left out) ->
    ``(2, 25.0)``; ``""`` or ``"off"``: no shadow. Errors name the model and the value."""
    text = text.replace(" ", "")
    if text in ("", "off"):
        return None
    version, sep, percent = text.partition(":")
    if not (version.isascii() and version.isdigit() and version[0] != "0" and len(version) <= 9):
        raise InvalidArgument(
            f"model '{model}': traffic_shadow '{text[:24]}' must be VERSION or VERSION:PERCENT "
            f"(a version number as its directory is named, a percent from 0 to 100)"
        )
    try:
        share = float(percent) if sep else 100.0
    except ValueError:
        share = -1.0
    if not 0 <= share <= 100:
        raise InvalidArgument(
            f"model '{model}': traffic_shadow percent must be a number from 0 to 100, got '{percent[:24]}'"
        )
    return int(version), share


@dataclass(frozen=True)
class ShadowPolicy:
    """How a shadow is compared and judged: the model's ``shadow_*`` config parameters, or these."""

    #: Floating-point outputs agree when |shadow - serving| <= atol + rtol x |serving| everywhere.
    atol: float = 1e-6
    rtol: float = 1e-5
    #: Copies compared before the shadow is judged.
    min_requests: int = 100
    #: The largest share of copies (a fraction) that may disagree or fail for the shadow to advance.
    max_disagreement: float = 0.0
    #: Copies in flight at most; a copy beyond them is dropped (and counted).
    queue: int = 64
    #: Whether a shadow that agrees advances into the canary stages by itself.
    advance: bool = True

    @classmethod
    def from_config(cls, params: ModelParameters) -> ShadowPolicy:
        d = cls()
        policy = cls(
            atol=float(params.number("shadow_atol", d.atol)),
            rtol=float(params.number("shadow_rtol", d.rtol)),
            min_requests=int(params.integer("shadow_min_requests", d.min_requests)),
            max_disagreement=float(params.number("shadow_max_disagreement", d.max_disagreement)),
            queue=int(params.integer("shadow_queue", d.queue)),
            advance=bool(params.flag("shadow_advance", d.advance)),
        )
        if (
            policy.atol < 0
            or policy.rtol < 0
            or policy.min_requests < 1
            or not 0 <= policy.max_disagreement <= 1
            or policy.queue < 1
        ):
            raise ValueError(
                "shadow_atol and shadow_rtol must be >= 0, shadow_min_requests >= 1, "
                "shadow_max_disagreement from 0 to 1, shadow_queue >= 1"
            )
        return policy

    def rule(self) -> str:
        return (
            f"advance into the canary stages once {self.min_requests} copies are compared and at most "
            f"{self.max_disagreement:.2%} of them disagree or fail (floats within {self.atol:g} + "
            f"{self.rtol:g} x |serving|, everything else exactly) and the shadow's p95 is within the canary "
            f"latency rule; else hold it at the shadow stage"
        )


def compare(serving: InferResponse, shadow: InferResponse, atol: float, rtol: float) -> tuple[bool, float, str]:
    """Whether ``shadow``'s outputs agree with ``serving``'s, the largest absolute difference
    (``inf`` for a missing output, a different datatype, shape or exact value) and why not."""
    worst = 0.0
    for out in serving.outputs:
        other = shadow.output(out.name)
        if other is None:
            return False, math.inf, f"output '{out.name}' missing"
        if other.datatype != out.datatype or tuple(other.shape) != tuple(out.shape):
            return (
                False,
                math.inf,
                f"output '{out.name}': {other.datatype} {list(other.shape)} where the serving version "
                f"answered {out.datatype} {list(out.shape)}",
            )
        a, b = np.asarray(out.data), np.asarray(other.data)
        if out.datatype in FLOATS:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            if a64.size:
                with np.errstate(invalid="ignore"):
                    diff = np.abs(a64 - b64)
                same_nan = np.isnan(a64) & np.isnan(b64)
                diff[same_nan] = 0.0
                biggest = float(np.nanmax(np.where(np.isnan(diff), math.inf, diff)))
                worst = max(worst, biggest)
                if not bool(np.all((diff <= atol + rtol * np.abs(a64)) | same_nan)) or math.isinf(biggest):
                    return False, worst, f"output '{out.name}': max abs difference {biggest:g}"
        elif not np.array_equal(a, b):
            if out.datatype in ("BYTES", "BOOL"):
                return False, math.inf, f"output '{out.name}': values differ"
            biggest = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            return False, max(worst, biggest), f"output '{out.name}': max abs difference {biggest:g}"
    return True, worst, ""


class Shadow:
    """One model's shadow: which version, what share, its policy, state and running comparisons."""

    def __init__(self, version: int, percent: float, policy: ShadowPolicy) -> None:
        self.version = version
        self.percent = percent
        #: A copy is taken when ``random() < rate`` (``rate`` >= 1: every answer).
        self.rate = percent / 100
        self.policy = policy
        self.state = SHADOW
        self.inflight = 0
        self.compared = self.agreed = self.disagreed = self.failed = self.dropped = 0
        self.diff_buckets = [0] * len(DIFF_BUCKETS)
        self.diff_sum = 0.0
        self.worst: list[dict[str, Any]] = []
        self.judged = False

    def record(self, request_id: str, agree: bool, diff: float, why: str, failed: bool = False) -> None:
        """One copy's outcome (``failed``: the shadow raised where the serving version answered)."""
        self.compared += 1
        if failed:
            self.failed += 1
        elif agree:
            self.agreed += 1
        else:
            self.disagreed += 1
        if not failed:
            self.diff_buckets[bisect_left(DIFF_BUCKETS, diff)] += 1
            if not math.isinf(diff):
                self.diff_sum += diff
        if not agree:
            self.worst.append(
                {"request_id": request_id, "max_abs_diff": diff if not math.isinf(diff) else None, "why": why}
            )
            self.worst.sort(key=lambda w: -(math.inf if w["max_abs_diff"] is None else w["max_abs_diff"]))
            del self.worst[KEEP_WORST:]

    def disagreement(self) -> float:
        """The share of compared copies that disagreed or failed."""
        return (self.disagreed + self.failed) / self.compared if self.compared else 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "agreed": self.agreed,
            "disagreed": self.disagreed,
            "failed": self.failed,
            "dropped": self.dropped,
            "in_flight": self.inflight,
            "agreement_rate": round(self.agreed / self.compared, 6) if self.compared else None,
        }

    def describe(self) -> dict[str, Any]:
        """What GET .../traffic shows under ``shadow``."""
        return {
            "version": self.version,
            "percent": self.percent,
            "state": self.state,
            **self.figures(),
            "worst": list(self.worst),
            "policy": {**self.policy.__dict__, "rule": self.policy.rule()},
        }

    def wire(self) -> str:
        return f"{self.version}:{self.percent:g}"
