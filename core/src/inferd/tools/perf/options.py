"""What one ``inferd perf`` run measures: perf_analyzer's settings as a dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.tools import ToolError

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}
PERCENTILES = (50, 90, 95, 99)


@dataclass
class PerfOptions:
    """Settings of a measurement; field names follow perf_analyzer's flags."""

    model: str
    version: str = ""
    url: str = ""
    protocol: str = "http"
    batch_size: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)
    input_data: str = "random"
    string_length: int = 128
    string_data: str | None = None
    measurement_interval_ms: int = 5000
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None
    latency_threshold_ms: float = 0.0
    streaming: bool = False
    async_mode: bool = True
    sequence_length: int | None = None
    sequence_length_variation: float = 20.0
    sequence_id_start: int = 1
    num_of_sequences: int = 4
    request_distribution: str = "constant"
    input_tensor_format: str = "binary"
    output_tensor_format: str = "binary"
    http_headers: dict[str, str] = field(default_factory=dict)
    verbose: bool = False
    shared_memory: str = "none"
    output_shared_memory_size: int = 102400

    def __post_init__(self) -> None:
        if not self.url:
            self.url = f"localhost:{DEFAULT_PORTS.get(self.protocol, 8000)}"
        if self.protocol not in DEFAULT_PORTS:
            raise ToolError(f"-i must be http or grpc, got '{self.protocol}'")
        if self.streaming and self.protocol != "grpc":
            raise ToolError("--streaming needs the gRPC protocol (-i grpc)")
        if self.batch_size < 1:
            raise ToolError(f"-b must be at least 1, got {self.batch_size}")
        if self.measurement_interval_ms <= 0 or self.max_trials < 1:
            raise ToolError("--measurement-interval and --max-trials must be positive")
        if self.shared_memory not in ("none", "system"):
            raise ToolError(f"--shared-memory {self.shared_memory} is not supported by inferd perf; use none or system")
        if self.output_shared_memory_size <= 0:
            raise ToolError("--output-shared-memory-size must be positive")
        if self.percentile is not None and not 0 < self.percentile < 100:
            raise ToolError(f"--percentile must be between 1 and 99, got {self.percentile}")

    @property
    def percentiles(self) -> tuple[int, ...]:
        """The percentiles reported: p50/p90/p95/p99 plus ``--percentile`` when it is another one."""
        extra = (self.percentile,) if self.percentile and self.percentile not in PERCENTILES else ()
        return tuple(sorted(PERCENTILES + extra))


def parse_range(text: str, flag: str, kind: type = int) -> list:
    """``start[:end[:step]]`` (perf_analyzer's range syntax) to the list of values it covers."""
    parts = text.split(":")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        raise ToolError(f"{flag} expects start:end:step with numbers, got '{text}'") from None
    if len(values) > 3 or values[0] <= 0:
        raise ToolError(f"{flag} expects start:end:step with a positive start, got '{text}'")
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else kind(1)
    if end == 0:
        raise ToolError(f"{flag}: an open end (0) is not supported; give the last value to measure")
    if step <= 0 or end < start:
        raise ToolError(f"{flag} expects end >= start and a positive step, got '{text}'")
    out, value, count = [], start, 0
    while value <= end + 1e-9:
        out.append(value)
        count += 1
        value = start + count * step
    return out


def parse_shape(text: str) -> tuple[str, list[int]]:
    """``NAME:d1,d2`` (``--shape``) to the input name and its dims (without the batch dim)."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = [int(d) for d in dims.split(",")] if dims else []
    except ValueError:
        shape = [-1]
    if not sep or not name or any(d < 0 for d in shape):
        raise ToolError(f"--shape expects NAME:d1,d2,... with non-negative dims, got '{text}'")
    return name, shape
