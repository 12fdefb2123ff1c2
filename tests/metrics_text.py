"""A server's Prometheus text (``/metrics`` on its metrics port) and the samples in it."""

from __future__ import annotations

import re
import urllib.request
from typing import Protocol

#: ``name{labels} value`` (a timestamp after the value is left out).
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)(?: \S+)?$", re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class HasMetricsPort(Protocol):
    metrics_port: int


def scrape(server: HasMetricsPort, timeout: float = 30.0) -> str:
    """One scrape of ``/metrics``, as text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=timeout) as response:
        return str(response.read().decode())


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Each sample of the series ``name`` in ``text``: its labels and its value."""
    return [
        (dict(_LABEL.findall(labels or "")), float(value))
        for found, labels, value in _SAMPLE.findall(text)
        if found == name
    ]


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of ``name`` with exactly these labels (in any order), or None when there is none."""
    return next((value for have, value in samples(text, name) if have == labels), None)


def metric(server: HasMetricsPort, name: str, **labels: str) -> float:
    """``name{labels}`` on one scrape of the server's ``/metrics``; 0 when it has no such sample
    (Prometheus' reading of a counter not yet written)."""
    return sample(scrape(server), name, **labels) or 0.0
