"""The monitor's last stage, wired once: the alerting engine built from ``--notify-config`` (or none), the
reward-outlier value the annotate stage reads, and, when the daemon starts, signed plot links and the
engine's own threads. The daemon calls ``build_engine`` and ``start``. The engine is an
``alerting.sink.AlertSink``: the pipeline subscribes it to the alert book's transition log once, when it is
built; from ``start`` on it reads that log on its own thread and connection, and nothing of the monitor's
calls it; what its diagnoses read (``DiagnosisNeeds``) is data."""

from __future__ import annotations

from typing import Any

from alerting.clock import Clock
from alerting.durable import StorageHealth
from alerting.sink import AlertSink
from monitor.book.annotate import RewardOutliers
from monitor.book.plotlinks import PlotLinks
from monitor.config import MonitorConfig
from monitor.endpoints.metrics import MonitorMetrics


def build_engine(config: MonitorConfig, clock: Clock, metrics: MonitorMetrics,
                 health: StorageHealth) -> AlertSink | None:
    """The ``AlertEngine`` of ``config.notify_config`` (its state next to the alert book), or None."""
    if config.notify_config is None:
        return None
    from alerting.engine import AlertEngine  # only needed when notifying: keeps a plain monitor's start light

    engine = AlertEngine.from_file(config.notify_config, config.state_db.with_name("alerting.db"), clock,
                                   registry=metrics.registry, health=health)
    engine.retention_s = config.retention
    return engine


def reward_outliers(config: MonitorConfig) -> RewardOutliers | None:
    """The value the daemon's outlier fetch fills and the annotate stage reads (None when turned off)."""
    if not config.reward_outliers:
        return None
    return RewardOutliers([(tg.name, tg.node or None) for tg in config.targets if tg.job == "verl"])


def start(pipeline: Any, engine: AlertSink | None, config: MonitorConfig, base_url: str) -> None:
    """Once the API listens at ``base_url``: plot and alert links point there (signed when a token is
    set), and the engine starts its own thread (following the log, timers) and one delivery worker per
    receiver."""
    pipeline.set_base_url(base_url)
    if config.plots_dir:
        pipeline.annotator.plot_links = PlotLinks(config.plots_dir, f"{base_url.rstrip('/')}/api/v1/plots",
                                        config.bearer_token)
    if engine is not None:
        engine.start(config.external_url or "")  # chat links open the console's pages
