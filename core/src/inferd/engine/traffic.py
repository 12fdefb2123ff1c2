"""Weighted versions: how requests that name no version are split among a model's versions.

A model's split comes from its config (``parameters { key: "traffic_split" value: { string_value:
"1:99,2:1" } }``) or live from ``POST /v2/models/<model>/traffic``. Picking a version is one
``crc32`` (a request id: the same id always lands on the same version, on every worker) or one
``random()``, and a bisect over the precomputed cumulative weights. The :mod:`inferd.engine.canary`
policy watches the versions' outcomes and rolls a worse canary back (weight 0) or promotes a
healthy one step by step; with ``--workers N`` every change is sent to the other workers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
import zlib
from bisect import bisect_right
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import Metric

from inferd.config.parameters import ModelParameters
from inferd.contracts.errors import InvalidArgument, NotFound
from inferd.engine.canary import Policy, Window, now
from inferd.engine.metric_sources import SOURCES
from inferd.engine.shadow import DIFF_BUCKETS, HELD, SHADOW, Shadow, ShadowPolicy, parse_shadow
from inferd.repository.scan import version_number

log = logging.getLogger(__name__)

STABLE, CANARY, ROLLED_BACK, PROMOTED, OFF = "stable", "canary", "rolled back", "promoted", "off"
#: Decisions kept per model (shown by GET .../traffic).
KEEP_DECISIONS = 20


#: The largest weight a version may have (docs/traffic.md). A split's total stays far inside a
#: float's exact integers, so picking a version is a few integer operations whatever the weights.
MAX_WEIGHT = 1_000_000
#: How much of a refused version or weight an error message quotes.
_QUOTE = 24


def parse_split(text: str, model: str, serving: list[int] | None = None) -> dict[int, int]:
    """``"1:99,2:1"`` -> ``{1: 99, 2: 1}`` (:func:`check_weights`, among ``serving`` when given);
    errors name the model and the part."""
    weights: dict[str, Any] = {}
    for part in text.replace(" ", "").split(","):
        version, sep, weight = part.partition(":")
        if not sep:
            raise InvalidArgument(f"model '{model}': traffic_split part '{_quote(part)}' is not VERSION:WEIGHT")
        weights[version] = weight
    return check_weights(weights, model, serving)


def check_weights(weights: Mapping[Any, Any], model: str, serving: list[int] | None = None) -> dict[int, int]:
    """Versions (as version directories are named: ``"1"``, not ``"01"``; among ``serving`` when
    given) -> weights (integers from 0 to :data:`MAX_WEIGHT`, not all 0), normalised: integer
    keys and values, by version."""
    if not isinstance(weights, Mapping) or not weights:
        raise InvalidArgument(f"model '{model}': traffic weights must be a non-empty object of version: weight")
    out: dict[int, int] = {}
    for key, weight in weights.items():
        version = version_number(key) if isinstance(key, str) else None
        if not version:
            raise InvalidArgument(
                f"model '{model}': traffic version '{_quote(key)}' is not a version number "
                f"(an integer > 0 written in digits, without a sign, spaces or leading zeros)"
            )
        out[version] = _weight(weight, model, version)
    if serving is not None:
        unknown = sorted(set(out) - set(serving))
        if unknown:
            raise NotFound(
                f"Request for unknown model: '{model}' version {unknown[0]} is not found; "
                f"available versions: {', '.join(map(str, serving))}"
            )
    if not any(out.values()):
        raise InvalidArgument(f"model '{model}': traffic weights are all 0 (at least one version needs a weight)")
    return dict(sorted(out.items()))


def _weight(value: Any, model: str, version: int) -> int:
    """A version's weight: an integer (or its digits as text) from 0 to :data:`MAX_WEIGHT`."""
    if type(value) is int:
        weight: int | None = value
    elif isinstance(value, str) and 0 < len(value) <= 7 and value.isascii() and value.isdigit():
        weight = int(value)
    else:
        weight = None
    if weight is None or not 0 <= weight <= MAX_WEIGHT:
        raise InvalidArgument(
            f"model '{model}': traffic weight of version {version} must be an integer from 0 to "
            f"{MAX_WEIGHT}, got {_quote(value)}"
        )
    return weight


def _quote(value: Any) -> str:
    """``value`` as an error message shows it: at most :data:`_QUOTE` characters of it, and how long it was."""
    if type(value) is int and abs(value) >= 10**_QUOTE:  # repr() of a very long one would raise
        return f"an integer of more than {_QUOTE} digits"
    text = value if isinstance(value, str) else repr(value) if isinstance(value, int | float | bool) else None
    if text is None:
        return f"a JSON {'object' if isinstance(value, Mapping) else 'array' if isinstance(value, list) else 'value'}"
    if len(text) > _QUOTE:
        return f"{text[:_QUOTE]}... ({len(text)} characters)"
    return text


class TrafficSplit:
    """One model's weights, version states, windows and decisions."""

    def __init__(self, model: str, weights: dict[int, int], policy: Policy, source: str = "api") -> None:
        self.model = model
        self.policy = policy
        self.source = source  # "config" (the traffic_split parameter) or "api"
        self.states: dict[int, str] = {}
        self.decisions: list[dict[str, Any]] = []
        self.last_check: dict[str, Any] = {}
        self.rollbacks: dict[int, int] = {}
        self.promotions: dict[int, int] = {}
        self.windows: dict[int, Window] = {}
        self._next_judge = 0.0
        #: The version that gets a copy of the answered requests (:mod:`inferd.engine.shadow`), if any.
        self.shadow: Shadow | None = None
        self.set_weights(weights)

    def set_weights(self, weights: dict[int, int], states: dict[int, str] | None = None) -> None:
        """New weights, applied at once (one assignment: a request picks from the old or the new)."""
        self.weights = dict(sorted(weights.items()))
        stable = max(self.weights, key=lambda v: (self.weights[v], -v))
        self.states = states or {v: STABLE if v == stable else (CANARY if w else OFF) for v, w in self.weights.items()}
        versions = tuple(v for v, w in self.weights.items() if w)
        cumulative, total = [], 0
        for v in versions:
            total += self.weights[v]
            cumulative.append(total)
        self._table = (versions, tuple(cumulative), total)
        self.windows = {v: self.windows.get(v) or Window(self.policy.window_s) for v in self.weights}
        shadow = self.shadow
        if shadow is not None:
            if self.weights.get(shadow.version):  # given a weight: it serves now, no longer a shadow
                self.shadow = None
            else:
                self.states[shadow.version] = shadow.state
        self._stable = self.stable()
        for window in self.windows.values():  # a run of failures is measured against one stable version
            window.streak = 0

    def pick(self, request_id: str) -> int:
        """The version a request with no version runs on: by its id's crc32 when it has one."""
        versions, cumulative, total = self._table
        slot = (zlib.crc32(request_id.encode()) * total) >> 32 if request_id else int(random.random() * total)
        return versions[bisect_right(cumulative, slot)]

    def set_shadow(self, version: int | None, percent: float = 100.0, policy: ShadowPolicy | None = None) -> None:
        """Copy ``percent`` % of the answered requests to ``version`` (at weight 0); ``None``: stop."""
        old = self.shadow
        if version is None:
            self.shadow = None
            if old is not None and old.version in self.states and not self.weights.get(old.version):
                self.states[old.version] = OFF
            return
        if self.weights.get(version):
            raise InvalidArgument(
                f"model '{self.model}': version {version} cannot be the shadow: it has weight "
                f"{self.weights[version]} in the split (a shadow answers nobody; give it weight 0)"
            )
        if old is not None and old.version == version:
            old.percent, old.rate = percent, percent / 100
            return
        self.shadow = Shadow(version, percent, policy or (old.policy if old else ShadowPolicy()))
        if old is not None and old.version in self.states and not self.weights.get(old.version):
            self.states[old.version] = OFF
        weights = {**self.weights, version: 0}
        self.set_weights(weights, {**self.states, version: SHADOW})

    def observe_shadow(self, request_id: str, ok: bool, agree: bool, diff: float, why: str, ns: int) -> str | None:
        """One shadow copy's outcome; the decision taken ("advance"/"hold") when the shadow was judged."""
        shadow = self.shadow
        if shadow is None:
            return None
        shadow.record(request_id, agree, diff, why, failed=not ok)
        t = now()
        window = self.windows.get(shadow.version)
        if window is not None:
            window.record(ok, ns, t)
        if shadow.judged or shadow.compared < shadow.policy.min_requests:
            return None
        return self._judge_shadow(shadow, t)

    def _judge_shadow(self, shadow: Shadow, t: float) -> str | None:
        """Advance the shadow into the canary stages, or hold it, on its comparisons and latency."""
        shadow.judged = True
        policy = shadow.policy
        stable = self._stable
        base = self.windows[stable].figures(t)
        mine = self.windows[shadow.version].figures(t)
        rate = shadow.disagreement()
        worse = []
        if rate > policy.max_disagreement:
            worse.append(
                f"disagreement {rate:.2%} ({shadow.disagreed} disagreed, {shadow.failed} failed of "
                f"{shadow.compared}) > {policy.max_disagreement:.2%}"
            )
        limit = max(base["p95_ms"] * (1 + self.policy.max_p95_increase), base["p95_ms"] + self.policy.p95_slack_ms)
        if base["requests"] and mine["requests"] and mine["p95_ms"] > limit:
            worse.append(f"p95 {mine['p95_ms']:g} ms > limit {limit:g} ms (serving p95 {base['p95_ms']:g} ms)")
        verdict = "; ".join(worse)
        self.last_check = {
            "shadow_version": shadow.version,
            "stable_version": stable,
            "shadow": {**mine, **shadow.figures()},
            "stable": base,
            "rule": policy.rule(),
            "verdict": verdict or "agrees",
        }
        if verdict:
            shadow.state = HELD
            self.states[shadow.version] = HELD
            self._record("hold", shadow.version)
            log.warning(
                "model '%s': shadow version %d held at the shadow stage: %s; worst: %s",
                self.model,
                shadow.version,
                verdict,
                shadow.worst[:3],
            )
            return "hold"
        if not policy.advance:
            return None
        step = self.policy.promote_steps[0] if self.policy.promote_steps else 1
        weights = {**dict.fromkeys(self.weights, 0), stable: 100 - step, shadow.version: step}
        states = {**self.states, shadow.version: CANARY}
        self.shadow = None
        self.windows[shadow.version].clear()  # the canary stage is judged on its own requests
        self.set_weights(weights, states)
        self._record("advance", shadow.version)
        log.warning(
            "model '%s': shadow version %d agreed (%d of %d copies); advanced to canary at %d %%; weights now %s",
            self.model,
            shadow.version,
            shadow.agreed,
            shadow.compared,
            step,
            self.wire_weights(),
        )
        return "advance"

    def _record(self, action: str, version: int) -> None:
        decision = {
            "time": time.time(),
            "action": action,
            "canary_version": version,
            **self.last_check,
            "weights": self.wire_weights(),
        }
        self.decisions = [*self.decisions[-(KEEP_DECISIONS - 1) :], decision]

    def stable(self) -> int:
        return next((v for v, s in self.states.items() if s in (STABLE, PROMOTED)), max(self.weights))

    def canaries(self) -> list[int]:
        return [v for v, s in self.states.items() if s == CANARY and self.weights.get(v)]

    def observe(self, version: int, ok: bool, ns: int) -> str | None:
        """Record one outcome; the decision taken ("rollback"/"promote") when the policy judged."""
        window = self.windows.get(version)
        if window is None:
            return None
        t = now()
        window.record(ok, ns, t)
        if not ok and version != self._stable and self.states.get(version) == CANARY and self.weights[version]:
            tripped = self._trip(version, window, t)
            if tripped:
                return tripped
        if t < self._next_judge:
            return None
        self._next_judge = t + window.bucket_s
        return self.judge(t)

    def _trip(self, canary: int, window: Window, t: float) -> str | None:
        """The fast trip, on a failure of ``canary``: O(1), from the windows' running totals."""
        if not self.policy.rollback:
            return None
        stable = self.windows[self._stable]
        stable.advance(t)
        if window.streak == 1:  # a run of failures begins: what the stable version has served so far
            window.mark_seen, window.mark_failed = stable.seen, stable.seen_failed
        verdict = self.policy.trips(
            window.requests,
            window.failures,
            stable.requests,
            stable.failures,
            window.streak,
            stable.seen - window.mark_seen,
            stable.seen_failed - window.mark_failed,
        )
        if not verdict:
            return None
        self.last_check = self._explain(canary, self._stable, window.figures(t), stable.figures(t), verdict)
        return self._decide("rollback", canary, {**self.weights, canary: 0}, ROLLED_BACK)

    def judge(self, t: float) -> str | None:
        canaries = self.canaries()
        if not canaries or (not self.policy.rollback and not self.policy.promote_steps):
            return None
        stable = self.stable()
        base = self.windows[stable].figures(t)
        for canary in canaries:
            figures = self.windows[canary].figures(t)
            verdict = self.policy.verdict(figures, base)
            self.last_check = self._explain(canary, stable, figures, base, verdict)
            if verdict and self.policy.rollback:
                return self._decide("rollback", canary, {**self.weights, canary: 0}, ROLLED_BACK)
            if verdict == "" and self.policy.promote_steps and len(canaries) == 1:
                return self._promote(canary, stable)
        return None

    def _promote(self, canary: int, stable: int) -> str | None:
        step = next((s for s in self.policy.promote_steps if s > self.weights[canary] * 100 // self._total()), None)
        if step is None:
            return None
        weights = {**dict.fromkeys(self.weights, 0), canary: step, stable: 100 - step}
        state = PROMOTED if step >= 100 else CANARY
        self.windows[canary].clear()  # the next step is judged on its own requests
        return self._decide("promote", canary, weights, state)

    def _total(self) -> int:
        return self._table[2] or 1

    def _decide(self, action: str, canary: int, weights: dict[int, int], state: str) -> str:
        states = dict(self.states)
        states[canary] = state
        if state == PROMOTED:
            states = {v: (PROMOTED if v == canary else OFF) for v in states}
        self.set_weights(weights, states)
        counter = self.rollbacks if action == "rollback" else self.promotions
        counter[canary] = counter.get(canary, 0) + 1
        decision = {"time": time.time(), "action": action, **self.last_check, "weights": self.wire_weights()}
        self.decisions = [*self.decisions[-(KEEP_DECISIONS - 1) :], decision]
        log.warning(
            "model '%s': canary version %d %s: %s; canary %s, stable %s, window %g s; weights now %s",
            self.model,
            canary,
            "rolled back" if action == "rollback" else "promoted",
            self.last_check.get("verdict") or "it holds",
            self.last_check["canary"],
            self.last_check["stable"],
            self.policy.window_s,
            self.wire_weights(),
        )
        return action

    def _explain(
        self, canary: int, stable: int, c: dict[str, float], s: dict[str, float], verdict: str | None
    ) -> dict[str, Any]:
        return {
            "canary_version": canary,
            "stable_version": stable,
            "canary": c,
            "stable": s,
            "window_s": self.policy.window_s,
            "rule": self.policy.rule(),
            "verdict": "too few requests to judge" if verdict is None else (verdict or "holds"),
        }

    def count(self, action: str, version: int) -> int:
        """How many ``action`` decisions concerned ``version`` (on any worker: decisions are shared)."""
        return sum(1 for d in self.decisions if d["action"] == action and d.get("canary_version") == version)

    def wire_weights(self) -> dict[str, int]:
        return {str(v): w for v, w in self.weights.items()}

    def describe(self, t: float | None = None) -> dict[str, Any]:
        """What GET .../traffic shows."""
        t = now() if t is None else t
        versions = {
            str(v): {
                "weight": w,
                "share": round(w / self._total(), 6),
                "state": self.states.get(v, OFF),
                "rollbacks": self.count("rollback", v),
                "promotions": self.count("promote", v),
                "window": self.windows[v].figures(t),
            }
            for v, w in self.weights.items()
        }
        return {
            "model": self.model,
            "weights": self.wire_weights(),
            "source": self.source,
            "versions": versions,
            "policy": {
                **self.policy.__dict__,
                "promote_steps": list(self.policy.promote_steps),
                "rule": self.policy.rule(),
            },
            "last_check": self.last_check,
            "decisions": self.decisions,
            "shadow": self.shadow.describe() if self.shadow is not None else None,
        }

    def wire(self) -> dict[str, Any]:
        """What another worker needs to take this split as it is."""
        return {
            "weights": self.wire_weights(),
            "states": {str(v): s for v, s in self.states.items()},
            "decisions": self.decisions,
            "source": self.source,
            "shadow": self.shadow.wire() if self.shadow is not None else "",
            "shadow_state": self.shadow.state if self.shadow is not None else "",
        }


class Traffic:
    """Every model's split (by model name), and the canary metrics."""

    def __init__(self) -> None:
        self.splits: dict[str, TrafficSplit] = {}
        #: Told of every change the canary policy makes here (model, the split's :meth:`TrafficSplit.wire`),
        #: not waited for: ``--workers N`` sends it to the other workers.
        self.listeners: list[Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]]] = []
        self._configured: dict[str, str] = {}  # model -> the traffic_split text its config had
        self._tasks: set[asyncio.Task[Any]] = set()
        _ALL.add(self)

    def configured(self, model: str, config: Any, serving: list[int]) -> None:
        """A model (re)loaded with ``config``: take its ``traffic_split`` and ``traffic_shadow`` when new or changed."""
        params = ModelParameters(config, model)
        text = params.get("traffic_split", "")
        shadow_text = params.get("traffic_shadow", "")
        key = f"{text}|{shadow_text}" if shadow_text else text
        if key == self._configured.get(model) and (model in self.splits or not key):
            return
        self._configured[model] = key
        if not key:
            self.splits.pop(model, None)
            return
        try:
            shadow = parse_shadow(shadow_text, model)
            if text:
                weights = parse_split(text, model, serving)
            elif shadow is not None:  # a shadow alone: the highest other version serves everything
                weights = {max(v for v in serving if v != shadow[0]): 100} if len(serving) > 1 else {}
                if not weights:
                    raise InvalidArgument(f"model '{model}': traffic_shadow needs another serving version")
            split = TrafficSplit(model, weights, Policy.from_config(params), "config")
            if shadow is not None:
                check_weights({str(shadow[0]): 0, **{str(v): w for v, w in weights.items()}}, model, serving)
                split.set_shadow(shadow[0], shadow[1], ShadowPolicy.from_config(params))
            self.splits[model] = split
        except (InvalidArgument, NotFound, ValueError) as exc:
            log.error(
                "model '%s': traffic_split '%s' / traffic_shadow '%s' not applied: %s", model, text, shadow_text, exc
            )

    def forget(self, model: str) -> None:
        self.splits.pop(model, None)
        self._configured.pop(model, None)

    def get(self, model: str) -> dict[str, Any]:
        split = self.splits.get(model)
        return split.describe() if split is not None else {"model": model, "weights": {}, "versions": {}}

    def set(
        self,
        model: str,
        weights: Mapping[str, Any] | None,
        serving: list[int],
        config: Any,
        shadow: str | None = None,
    ) -> dict[str, Any]:
        """Set ``model``'s weights and/or shadow (``"2:100"``; ``""``/``"off"`` stops it) live (a new
        split takes its policies from ``config``)."""
        parsed = parse_shadow(shadow, model) if shadow is not None else None
        if parsed is not None and parsed[0] not in serving:
            check_weights({str(parsed[0]): 1}, model, serving)  # Triton's 'unknown model ... version'
        split = self.splits.get(model)
        if weights is None:
            if split is None:
                if parsed is None:
                    raise InvalidArgument(f"model '{model}' has no traffic split: give \"weights\" first")
                others = [v for v in serving if v != parsed[0]]
                if not others:
                    raise InvalidArgument(f"model '{model}': a shadow needs another serving version")
                weights = {str(max(others)): 100}
            else:
                weights = split.wire_weights()
        checked = check_weights(weights, model, serving)
        if parsed is not None and checked.get(parsed[0]):  # refused before anything changes
            raise InvalidArgument(
                f"model '{model}': version {parsed[0]} cannot be the shadow: it has weight "
                f"{checked[parsed[0]]} in the split (a shadow answers nobody; give it weight 0)"
            )
        params = ModelParameters(config, model)
        try:
            shadow_policy = ShadowPolicy.from_config(params) if parsed is not None else None
            policy = Policy.from_config(params) if split is None else split.policy
        except ValueError as exc:
            raise InvalidArgument(f"model '{model}': {exc}") from None
        if split is None:
            split = TrafficSplit(model, checked, policy)
        else:
            split.set_weights(checked)
            split.source = "api"
        if shadow is not None:
            if parsed is None:
                split.set_shadow(None)
            else:
                split.set_shadow(None)  # a shadow set anew starts its comparisons afresh
                split.set_shadow(parsed[0], parsed[1], shadow_policy)
        self.splits[model] = split
        return split.describe()

    def apply_wire(self, model: str, wire: dict[str, Any], config: Any) -> None:
        """Take the split another worker sent (its weights, states and decisions)."""
        weights = {int(v): int(w) for v, w in wire["weights"].items()}
        split = self.splits.get(model)
        if split is None:
            split = self.splits[model] = TrafficSplit(
                model, weights, Policy.from_config(ModelParameters(config, model))
            )
        shadow = parse_shadow(wire.get("shadow", ""), model)
        current = split.shadow
        if shadow is None or weights.get(shadow[0]):
            split.shadow = None
        elif current is None or current.version != shadow[0]:
            split.shadow = Shadow(shadow[0], shadow[1], ShadowPolicy.from_config(ModelParameters(config, model)))
        else:
            current.percent, current.rate = shadow[1], shadow[1] / 100
        if split.shadow is not None and wire.get("shadow_state") == HELD:
            split.shadow.state, split.shadow.judged = HELD, True
        split.set_weights(weights, {int(v): s for v, s in wire["states"].items()})
        split.decisions, split.source = wire["decisions"], wire["source"]

    def decided(self, model: str) -> None:
        """The policy changed ``model``'s split here: tell the :attr:`listeners` (not waited for)."""
        split = self.splits.get(model)
        if split is None:
            return
        for listener in self.listeners:
            task = asyncio.get_running_loop().create_task(listener(model, split.wire()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def mark_stats(self, stats: list[dict[str, Any]]) -> None:
        """Add ``traffic`` (state, weight, rollbacks, promotions) to each split version's statistics entry."""
        for entry in stats:
            split = self.splits.get(entry.get("name", ""))
            version = int(entry.get("version") or 0)
            if split is not None and version in split.weights:
                entry["traffic"] = {
                    "state": split.states.get(version, OFF),
                    "weight": split.weights[version],
                    "rollbacks": split.count("rollback", version),
                    "promotions": split.count("promote", version),
                }

    def mark_index(self, rows: list[dict[str, str]]) -> None:
        """Add each split version's traffic state (and a rollback's reason) to the repository index rows."""
        for row in rows:
            split = self.splits.get(row.get("name", ""))
            version = row.get("version", "")
            if split is None or not version.isdigit() or int(version) not in split.weights:
                continue
            state = split.states.get(int(version), OFF)
            row["traffic"] = f"{state} (weight {split.weights[int(version)]})"
            if state == ROLLED_BACK and not row.get("reason"):
                last: dict[str, Any] = next(
                    (d for d in reversed(split.decisions) if d.get("canary_version") == int(version)), {}
                )
                row["reason"] = f"canary rolled back: {last.get('verdict', '')}"
            elif state == HELD and not row.get("reason"):
                row["reason"] = f"shadow held: {split.last_check.get('verdict', '')}"

    def collect(self) -> Iterator[Any]:
        """``inferd_canary_rollbacks_total``, ``inferd_canary_promotions_total`` (this worker's decisions)
        and ``inferd_traffic_weight``, by model and version; for a shadow, ``inferd_shadow_requests_total``
        (by outcome) and the ``inferd_shadow_max_abs_diff`` histogram."""
        families = [
            _family("inferd_canary_rollbacks_total", "Canary versions rolled back by the canary policy", "counter"),
            _family("inferd_canary_promotions_total", "Promotion steps the canary policy took", "counter"),
            _family("inferd_traffic_weight", "Share of unversioned requests a version receives (0-1)", "gauge"),
        ]
        copies = _family("inferd_shadow_requests_total", "Shadow copies by outcome (this worker)", "counter")
        diffs = _family(
            "inferd_shadow_max_abs_diff", "Largest absolute output difference of a shadow copy", "histogram"
        )
        shadows = False
        for model, split in sorted(self.splits.items()):
            for v, w in split.weights.items():
                labels = {"model": model, "version": str(v)}
                values = (split.rollbacks.get(v, 0), split.promotions.get(v, 0), w / split._total())
                for family, value in zip(families, values, strict=True):
                    family.add_sample(family.name, labels, value)
            shadow = split.shadow
            if shadow is None:
                continue
            shadows = True
            labels = {"model": model, "version": str(shadow.version)}
            for outcome in ("agreed", "disagreed", "failed", "dropped"):
                copies.add_sample(copies.name, {**labels, "outcome": outcome}, getattr(shadow, outcome))
            total = 0
            for bound, count in zip(DIFF_BUCKETS, shadow.diff_buckets, strict=True):
                total += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                diffs.add_sample(diffs.name + "_bucket", {**labels, "le": le}, total)
            diffs.add_sample(diffs.name + "_count", labels, total)
            diffs.add_sample(diffs.name + "_sum", labels, shadow.diff_sum)
        if self.splits:  # no empty families: the text exposition drops them, OpenMetrics would not
            yield from families
        if shadows:
            yield copies
            yield diffs


def _family(name: str, text: str, kind: str) -> Metric:
    family = Metric(name, text, kind)
    family.name = name  # as named: prometheus_client would drop a counter's "_total"
    return family


_ALL: weakref.WeakSet[Traffic] = weakref.WeakSet()


class _Collector:
    """Every live :class:`Traffic`'s families (one per server in this process)."""

    def collect(self) -> Iterator[Any]:
        for traffic in list(_ALL):
            yield from traffic.collect()


SOURCES.add(_Collector())
