"""Re-export of a verl JSONL run's mapped series on the monitor's own ``/metrics`` (``jsonl[].export``),
so the Grafana dashboards, which query our ``verl_*`` names, work for volcengine verl runs too.

Latest value per series, as gauges (``*_total`` as counters); the source's ``job`` label is dropped
(Prometheus adds its own for the monitor's scrape) and ``up`` is not re-exported. Bounded: at most
``max_series`` series; new ones beyond are counted in ``dropped``, not exported.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from monitor.model import Sample


class VerlSeriesExport(Collector):
    def __init__(self, max_series: int = 5000) -> None:
        self.max_series = max_series
        self.dropped = 0
        self._latest: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()

    def update(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            for s in samples:
                if s.name == "up":
                    continue
                key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "job")))
                if key not in self._latest and len(self._latest) >= self.max_series:
                    self.dropped += 1
                    continue
                self._latest[key] = s.value

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            items = sorted(self._latest.items())
        families: dict[str, Metric] = {}
        for (name, labels), value in items:
            counter = name.endswith("_total")
            base = name[: -len("_total")] if counter else name
            fam = families.get(base)
            if fam is None:
                fam = families[base] = Metric(base, "verl JSONL series (volcengine verl file logger), re-exported",
                                              "counter" if counter else "gauge")
            fam.add_sample(name, dict(labels), value)
        yield from families.values()
