"""Small typed records passed forward between the monitor's stages (source -> store -> evaluator)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from alerting.model import NON_IDENTITY_LABELS

# Labels that identify *where* a sample came from rather than *what* it measures. They name the node
# (see ``resolve_node``) but would make every alert fingerprint depend on the scrape path, so they
# never become alert labels -- the same set alerting's fingerprints ignore, so the monitor's own alert
# and Prometheus' for one outage are one alert.
PLUMBING_LABELS = NON_IDENTITY_LABELS


@dataclass(frozen=True)
class Sample:
    """One observation of one series at the source's own timestamp (Unix seconds)."""

    name: str
    labels: dict[str, str]
    value: float
    t: float


@dataclass
class SourceBatch:
    """What one source poll produced: samples plus malformed-input counts by reason."""

    source: str
    samples: list[Sample] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # reason -> what the log line says instead of a count
    refused: list[Sample] = field(default_factory=list)  # present in the input, stamps out of bounds
    # The scrape cache's share (monitor.sources.scrape_cache): (known series, their values, time), the
    # new samples with their line keys to learn, and the exposition's comment lines.
    known: tuple[list[Any], Any, float] | None = None
    learn: list[tuple[Any, ...]] = field(default_factory=list)
    comments: list[str] | None = None

    def error(self, reason: str, n: int = 1) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + n


_HOST_RE = re.compile(r"^\[?([^\]]+?)\]?(?::\d+)?$")


def resolve_node(labels: dict[str, str], configured: str | None = None) -> str:
    """The SPEC's node rule: configured name, else dcgm ``Hostname``/``hostname``, else instance host."""
    if configured:
        return configured
    if labels.get("node"):
        return labels["node"]
    for key in ("Hostname", "hostname"):
        if labels.get(key):
            return labels[key]
    instance = labels.get("instance", "")
    if instance:
        m = _HOST_RE.match(instance)
        return m.group(1) if m else instance
    return "unknown"


def with_node(labels: dict[str, str], configured: str | None = None) -> dict[str, str]:
    out = dict(labels)
    out["node"] = resolve_node(labels, configured)
    return out
