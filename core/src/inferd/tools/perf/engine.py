"""The measuring engine behind ``inferd perf``; ``inferd analyze`` imports it.

::

    async with PerfSession(PerfOptions(model="add_sub", protocol="grpc")) as session:
        result = await session.measure_concurrency(8)
"""

from __future__ import annotations

from typing import Any

from inferd.tools import ToolError
from inferd.tools.perf.connect import open_transport
from inferd.tools.perf.inputs import build_data
from inferd.tools.perf.load import ConcurrencyLoad, Feed, RateLoad, Recorder
from inferd.tools.perf.model import ModelInfo
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.profiler import LevelResult, measure
from inferd.tools.perf.shm import PerfRegions
from inferd.tools.perf.transport import Transport


class PerfSession:
    """A connection to the server, the model's description, and encoded request data."""

    def __init__(self, opts: PerfOptions) -> None:
        self.opts = opts
        self.recorder = Recorder()
        self.transport: Transport | None = None
        self.info: ModelInfo | None = None
        self._feed: Feed | None = None
        self._regions: PerfRegions | None = None

    async def __aenter__(self) -> PerfSession:
        self.transport = open_transport(self.opts)
        try:
            await self.setup()
        except BaseException:
            await self.__aexit__()  # shared-memory regions made so far are removed too
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.transport is not None:
            if self._regions is not None:
                await self._regions.release(self.transport)
            await self.transport.close()

    async def setup(self) -> None:
        """Read the model's metadata and config; encode the request data."""
        assert self.transport is not None
        info = self.info = await self.transport.model_info()
        if info.is_decoupled and not self.opts.streaming:
            raise ToolError(f"model '{info.name}' is decoupled: measure it with -i grpc --streaming")
        self.transport.decoupled = info.is_decoupled
        datatypes = {s.name: s.datatype for s in info.inputs}
        streams = build_data(info, self.opts)
        if self.opts.shared_memory == "system":
            self._regions = PerfRegions(self.opts.output_shared_memory_size)
            placed = self._regions.place(streams, info)
            await self._regions.register(self.transport)
            encoded = [
                [self.transport.prepare(e, datatypes, p) for e, p in zip(stream, where, strict=True)]
                for stream, where in zip(streams, placed, strict=True)
            ]
        else:
            encoded = [[self.transport.prepare(entry, datatypes) for entry in stream] for stream in streams]
        self._feed = Feed(encoded, self.opts, info.is_sequence)

    @property
    def decoupled(self) -> bool:
        return bool(self.info and self.info.is_decoupled)

    async def measure_concurrency(self, concurrency: int) -> LevelResult:
        """Keep ``concurrency`` requests in flight and measure until stable."""
        assert self.transport is not None and self._feed is not None
        load = ConcurrencyLoad(self.transport, self._feed, self.recorder, self.decoupled)
        load.start(concurrency)
        return await measure(load, self.transport, self.recorder, self.opts, "concurrency", concurrency)

    async def measure_rate(self, rate: float) -> LevelResult:
        """Send ``rate`` requests per second and measure until stable."""
        assert self.transport is not None and self._feed is not None
        load = RateLoad(self.transport, self._feed, self.recorder, self.decoupled)
        load.start(rate, self.opts.request_distribution, self.opts.num_of_sequences)
        return await measure(load, self.transport, self.recorder, self.opts, "request_rate", rate)
