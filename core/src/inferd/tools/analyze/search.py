"""The configurations a sweep tries: max_batch_size x instance count x dynamic batching
(queue delay, preferred batch sizes), each a ``ModelConfig`` derived from the served one."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from inferd.config import ModelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchSpace:
    """The values to combine (model_analyzer's manual search)."""

    max_batch_sizes: Sequence[int] = ()
    instance_counts: Sequence[int] = (1, 2)
    dynamic_batching: Sequence[bool] = (True, False)
    queue_delays_us: Sequence[int] = (0, 100)
    preferred_batch_sizes: Sequence[tuple[int, ...]] = ((),)
    include_default: bool = True


@dataclass
class Candidate:
    """One configuration to load and measure."""

    name: str
    config: ModelConfig

    @property
    def max_batch_size(self) -> int:
        return int(self.config.max_batch_size)

    @property
    def instances(self) -> int:
        return sum(max(1, g.count) for g in self.config.instance_group) or 1

    @property
    def dynamic_batching(self) -> bool:
        return self.config.HasField("dynamic_batching")

    @property
    def queue_delay_us(self) -> int | None:
        return int(self.config.dynamic_batching.max_queue_delay_microseconds) if self.dynamic_batching else None

    @property
    def preferred(self) -> tuple[int, ...]:
        return tuple(self.config.dynamic_batching.preferred_batch_size) if self.dynamic_batching else ()

    def describe(self) -> str:
        db = "off"
        if self.dynamic_batching:
            db = f"on (delay {self.queue_delay_us} us" + (
                f", preferred {list(self.preferred)})" if self.preferred else ")"
            )
        return f"max_batch_size {self.max_batch_size}, {self.instances} instance(s), dynamic batching {db}"


def _derive(
    base: ModelConfig, mbs: int, count: int, dynamic: bool, delay: int, preferred: tuple[int, ...]
) -> ModelConfig:
    config = ModelConfig()
    config.CopyFrom(base)
    config.max_batch_size = mbs
    if count > 0:
        first = base.instance_group[0] if base.instance_group else None
        del config.instance_group[:]
        group = config.instance_group.add(count=count)
        if first is not None:
            group.kind = first.kind
            group.gpus.extend(first.gpus)
    if dynamic:
        config.dynamic_batching.Clear()
        config.dynamic_batching.max_queue_delay_microseconds = delay
        config.dynamic_batching.preferred_batch_size.extend(preferred)
    else:
        config.ClearField("dynamic_batching")
    return config


def _key(config: ModelConfig) -> bytes:
    """What makes two configs the same for the sweep (instance group names do not)."""
    copy = ModelConfig()
    copy.CopyFrom(config)
    for group in copy.instance_group:
        group.name = ""
    return copy.SerializeToString(deterministic=True)


def candidates(model: str, base: ModelConfig, space: SearchSpace) -> list[Candidate]:
    """The default config (unless excluded) and every distinct combination of the search space."""
    out = [Candidate(f"{model}_config_default", base)] if space.include_default else []
    seen = {_key(base)} if space.include_default else set()
    batching = base.max_batch_size > 0
    mbs_list = list(space.max_batch_sizes) or [int(base.max_batch_size)]
    if not batching and any(m > 0 for m in mbs_list):
        log.warning("model '%s' does not batch (max_batch_size 0): sweeping max_batch_size 0 only", model)
        mbs_list = [0]
    fixed_scheduler = base.HasField("sequence_batching") or base.HasField("ensemble_scheduling")
    dyn_list = [False] if fixed_scheduler or not batching else list(space.dynamic_batching)
    counts = list(space.instance_counts)
    if base.HasField("ensemble_scheduling"):
        counts = [0]  # an ensemble has no instances of its own
    index = 0
    for mbs, count, dynamic in itertools.product(mbs_list, counts, dyn_list):
        combos = itertools.product(space.queue_delays_us, space.preferred_batch_sizes) if dynamic else [(0, ())]
        for delay, preferred in combos:
            if any(p > mbs for p in preferred):
                continue
            config = _derive(base, mbs, count, dynamic, delay, preferred)
            key = _key(config)
            if key in seen:
                continue
            seen.add(key)
            out.append(Candidate(f"{model}_config_{index}", config))
            index += 1
    return out
