"""The garbage collector's settings while serving: fewer young collections, the start-up heap frozen.

Every request allocates a few dozen container objects (the request, its tensors, futures, the
coroutines of its path) that live until it is answered; with 64 requests in flight, Python's
default young-generation threshold (700) runs a collection every few requests and promotes the
survivors, which the older generations then walk again. Measured with
``benchmarks/request_path.py`` (tiny model, 64 callers): the event loop spent ~21-27 us of CPU per
request with the defaults, ~17 us with a 10,000-object threshold and the start-up heap frozen.

:func:`settle` runs once the server has started (``inferd serve``): it raises the threshold and
freezes what start-up built (imports, plugins, loaded models) out of the collector's sight, as
``gc.freeze`` is meant for. Frozen objects are never collected, so the first time a model version
is unloaded (:func:`thaw`, from the lifecycle) everything goes back to the collector: a reloaded
model's cycles are freed as usual.

:func:`start_up` sets the same thresholds from the process's first line (``inferd serve``'s command
line module), for the start-up itself: imports and model loads build a heap of millions of objects
that all survive, and at the default thresholds the collector walks that growing heap again and
again. Importing vLLM's engine (the vLLM backend's, and its engine process's) took 13.6 s of CPU
with the defaults, ~2.4 s of it in collections, and 10 s with these thresholds.
"""

from __future__ import annotations

import gc

#: The young generation's threshold while serving (Python's default: 700).
YOUNG_THRESHOLD = 10_000


def start_up() -> None:
    """Collect the young generation less often while the process starts (as :func:`settle` does
    once it has started)."""
    gc.set_threshold(YOUNG_THRESHOLD, 20, 100)


def settle() -> None:
    """Raise the collection thresholds and freeze the heap start-up built."""
    start_up()
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()


def thaw() -> None:
    """Give frozen objects back to the collector (a model version is going away)."""
    if gc.get_freeze_count():
        gc.unfreeze()
