"""Load each candidate configuration through the repository API, measure it with the perf
engine at every concurrency, rank the candidates under the constraints, restore the original."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inferd.config import ModelConfig, config_to_json
from inferd.tools import ToolError
from inferd.tools.analyze.progress import PointCounter
from inferd.tools.analyze.search import Candidate, SearchSpace, candidates
from inferd.tools.perf.connect import open_transport
from inferd.tools.perf.engine import PerfSession
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.profiler import LevelResult
from inferd.tools.perf.transport import Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Constraints:
    """Limits a measurement must meet (model_analyzer's ``constraints``)."""

    latency_budget_ms: float | None = None
    latency_percentile: int = 99
    min_throughput: float | None = None

    def check(self, r: LevelResult) -> bool:
        if self.min_throughput is not None and r.throughput < self.min_throughput:
            return False
        return self.latency_budget_ms is None or latency_ms(r, self.latency_percentile) <= self.latency_budget_ms


class ControlModeError(ToolError):
    """The server refuses the repository load API (model control mode none or poll)."""


def latency_ms(r: LevelResult, percentile: int) -> float:
    return r.percentiles_us.get(percentile, r.avg_latency_us) / 1000.0


@dataclass
class Measurement:
    """One (configuration, client batch size, concurrency) point."""

    batch_size: int
    concurrency: int
    result: LevelResult
    meets: bool


@dataclass
class CandidateResult:
    """A candidate and what was measured (or why it could not be)."""

    candidate: Candidate
    measurements: list[Measurement] = field(default_factory=list)
    error: str | None = None

    @property
    def best(self) -> Measurement | None:
        """The highest-throughput measurement that meets the constraints, else the highest overall."""
        ok = [m for m in self.measurements if m.meets] or self.measurements
        return max(ok, key=lambda m: m.result.throughput, default=None)

    @property
    def meets(self) -> bool:
        return any(m.meets for m in self.measurements)


def rank(results: Sequence[CandidateResult]) -> list[CandidateResult]:
    """Candidates meeting the constraints first, each group by best throughput, failures last."""

    def key(c: CandidateResult) -> tuple[int, float]:
        best = c.best
        return (0 if c.meets else 1 if best else 2, -(best.result.throughput if best else 0.0))

    return sorted(results, key=key)


def config_json(config: ModelConfig) -> str:
    return json.dumps(config_to_json(config), separators=(",", ":"))


class Sweep:
    """Runs the candidates of ``space`` on the model named in ``base_opts``."""

    def __init__(
        self,
        base_opts: PerfOptions,
        space: SearchSpace,
        concurrencies: Sequence[int],
        batch_sizes: Sequence[int],
        constraints: Constraints,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.opts = base_opts
        self.space = space
        self.concurrencies = list(concurrencies)
        self.batch_sizes = list(batch_sizes)
        self.constraints = constraints
        self.progress = progress or (lambda line: log.info("%s", line))
        self.original: ModelConfig | None = None
        self._touched = False
        self.points = PointCounter(0)

    async def run(self) -> list[CandidateResult]:
        """Measure every candidate; the original config is loaded again at the end, whatever happens."""
        control = open_transport(self.opts)
        try:
            was_loaded = True
            try:
                info = await control.model_info()
            except ToolError as exc:  # not loaded yet (explicit mode)? load it from the repository
                try:
                    await _load(control, None, "loading it from the repository")
                except ToolError as load_exc:
                    raise ToolError(f"{exc}; {load_exc}") from None
                info, was_loaded = await control.model_info(), False
            self.original = info.config
            todo = candidates(self.opts.model, info.config, self.space)
            self.points = PointCounter(sum(len(self._batches(c)) * len(self.concurrencies) for c in todo))
            self.progress(
                f"{len(todo)} configurations of model '{self.opts.model}' to measure, {self.points.total} points"
            )
            try:
                results = [await self._measure(control, candidate) for candidate in todo]
            finally:
                if not was_loaded:
                    self.progress(f"unloading model '{self.opts.model}' (it was not loaded before)")
                    await control.unload()
                elif self._touched:  # a candidate was loaded: put the original back
                    self.progress("restoring the original configuration")
                    await _load(control, config_json(self.original), "restoring the original configuration")
            return results
        finally:
            await control.close()

    async def _measure(self, control: Transport, candidate: Candidate) -> CandidateResult:
        out = CandidateResult(candidate)
        self.progress(f"{candidate.name}: {candidate.describe()}")
        try:
            await _load(control, config_json(candidate.config), f"loading {candidate.name}")
            self._touched = True
        except ControlModeError:
            raise
        except ToolError as exc:
            out.error = str(exc)
            self.progress(f"  {candidate.name} failed to load: {exc}")
            self.points.skip(len(self._batches(candidate)) * len(self.concurrencies))
            return out
        for batch in self._batches(candidate):
            opts = dataclasses.replace(self.opts, batch_size=batch)
            try:
                async with PerfSession(opts) as session:
                    for concurrency in self.concurrencies:
                        r = await session.measure_concurrency(concurrency)
                        meets = self.constraints.check(r)
                        out.measurements.append(Measurement(batch, concurrency, r, meets))
                        p = self.constraints.latency_percentile
                        self.progress(
                            f"  {self.points.step()} batch {batch}, concurrency {concurrency}: "
                            f"{r.throughput:.1f} infer/sec, p{p} {latency_ms(r, p):.2f} ms, "
                            f"{'stable' if r.stable else 'UNSTABLE (no stable window in --max-trials)'}"
                            f"{'' if meets else '  (misses constraints)'}"
                        )
            except ToolError as exc:
                out.error = str(exc)
                self.progress(f"  {candidate.name}: {exc}")
        return out

    def _batches(self, candidate: Candidate) -> list[int]:
        """The batch sizes measured on ``candidate`` (none above its max_batch_size; 1 without batching)."""
        mbs = candidate.max_batch_size
        return [b for b in self.batch_sizes if not ((mbs == 0 and b > 1) or (mbs > 0 and b > mbs))]


async def _load(control: Transport, config: str | None, what: str) -> None:
    try:
        await control.load(config)
    except ToolError as exc:
        text = str(exc)
        if "not allowed" in text.lower():  # the server's model control mode is none or poll
            raise ControlModeError(
                f"{what}: {text}; inferd analyze needs the server started with --model-control-mode=explicit"
            ) from None
        raise
