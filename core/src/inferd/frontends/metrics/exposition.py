"""One scrape of a registry, in the format the ``Accept`` header asks for.

``prometheus_client`` negotiates: ``application/openmetrics-text; version=1.0.0`` gets its
OpenMetrics writer (ending in ``# EOF``); anything else gets Triton's classic text format
(version 0.0.4) as prometheus-cpp writes it. That writer is the one thing kept here, because the
library's own classic writer renames every counter family ``<name>_total``, writes ``5`` as
``5.0`` and sorts ``quantile``/``le`` among the other labels; Triton's scrapers see none of that.

Triton's counters are not named ``*_total`` (``nv_inference_request_success``), and OpenMetrics
requires a counter's sample to be ``<name>_total``. So that a Prometheus which negotiates
OpenMetrics stores the same series names as one scraping Triton, counters are exposed there with
type ``unknown`` under their own names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
_CLASSIC_TYPES = {"unknown": "untyped"}


def number(value: float) -> str:
    """A value as prometheus-cpp writes it: integers bare, other numbers in shortest form."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    """``{a="1",b="2",le="5"}``: names sorted, ``le`` and ``quantile`` last."""
    if not labels:
        return ""
    keys = sorted(k for k in labels if k not in ("le", "quantile")) + [k for k in ("le", "quantile") if k in labels]
    return "{" + ",".join(f'{k}="{_escape(labels[k])}"' for k in keys) + "}"


def _sample_name(family: Metric, name: str) -> str:
    """A counter's ``<name>_total`` sample under the family's own name, as Triton writes it."""
    return family.name if family.type == "counter" and name == family.name + "_total" else name


def classic_text(registry: Collector) -> bytes:
    """Triton's text exposition format of everything ``registry`` collects."""
    lines: list[str] = []
    for family in registry.collect():
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {_help(family.documentation)}")
        lines.append(f"# TYPE {family.name} {_CLASSIC_TYPES.get(family.type, family.type)}")
        lines.extend([f"{_sample_name(family, s.name)}{_labels(s.labels)} {number(s.value)}" for s in family.samples])
    return ("\n".join(lines) + "\n" if lines else "").encode()


class TritonNames(Collector):
    """``registry`` as OpenMetrics shows it: counters as ``unknown`` families under Triton's names."""

    def __init__(self, registry: Collector) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            if family.type != "counter":
                yield family
                continue
            same = Metric(family.name, family.documentation, "unknown")
            for s in family.samples:
                same.add_sample(_sample_name(family, s.name), s.labels, s.value)
            yield same


def scrape(registry: Collector, accept: str) -> tuple[bytes, str]:
    """The body and content type answering a scrape with this ``Accept`` header."""
    encoder, content_type = choose_encoder(accept)
    if content_type.startswith("application/openmetrics-text"):
        return encoder(TritonNames(registry)), content_type
    return classic_text(registry), CONTENT_TYPE
