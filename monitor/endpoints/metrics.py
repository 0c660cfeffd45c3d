"""The daemon's own metrics (names fixed by the cross-team contract; dashboards/monitor.json uses them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class MonitorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples_ingested = Counter("verl_monitor_samples_ingested", "Samples accepted into the store.",
                                        ["source"], registry=r)
        self.scrape_errors = Counter("verl_monitor_scrape_errors", "Source errors and rejected input by reason.",
                                     ["target", "reason"], registry=r)
        self.scrape_duration = Gauge("verl_monitor_scrape_duration_seconds", "Duration of the last scrape.",
                                     ["target"], registry=r)
        self.target_up = Gauge("verl_monitor_target_up", "1 if the last scrape of the target succeeded.",
                               ["target"], registry=r)
        self.detector_eval = Histogram("verl_monitor_detector_eval_seconds",
                                       "Time spent in detectors per ingested batch or tick.", registry=r,
                                       buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0))
        self.eval_lag = Gauge("verl_monitor_eval_lag_seconds",
                              "Clock time minus the newest sample's timestamp at the last evaluation.", registry=r)
        self.alerts_firing = Gauge("verl_monitor_alerts_firing", "Alerts currently firing.",
                                   ["alertname", "severity"], registry=r)
        self.series = Gauge("verl_monitor_series", "Series held in the store.", registry=r)
        self.clock_steps = Counter("verl_monitor_clock_steps", "Wall-clock steps detected (and absorbed).",
                                   registry=r)
        self.eval_failures = Counter("verl_monitor_eval_failures", "Evaluation ticks that raised.", registry=r)
        self.series_dropped = Counter("verl_monitor_series_dropped", "New series refused by the cardinality caps.",
                                      ["reason"], registry=r)
        self.window_unfillable = Gauge("verl_monitor_rule_window_unfillable",
                                       "1 for a rule whose detector window cannot hold its minimum sample count at "
                                       "the series' sampling interval (it would never test): resize it in steps.",
                                       ["alertname", "detector"], registry=r)

    def export_storage_errors(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        """``verl_monitor_storage_errors_total{db,op}``, read from the storage health's own count at scrape
        time (alerting's writers count their failures; nothing in alerting calls into the monitor)."""
        self.registry.register(_StorageErrors(counts))


class _StorageErrors(Collector):
    def __init__(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("verl_monitor_storage_errors",
                                     "Failed state writes (disk full, read-only, I/O error) by database and operation.",
                                     labels=["db", "op"])
        for (db, op), n in sorted(self.counts().items()):
            family.add_metric([db, op], n)
        yield family
