"""Shared test helpers for the alerting tests (importable as ``tests.alerting.helpers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alerting.clock import SimulatedClock
from alerting.config import AlertingConfig, parse_config
from alerting.engine import AlertEngine
from alerting.model import Alert

T0 = 1_744_467_797.0  # 2025-04-12 14:23:17 UTC, the article's example time


def alert(name: str, severity: str = "P1", node: str = "gpu-08", cluster: str = "llama3-1k-gpu",
          status: str = "firing", **labels: str) -> Alert:
    return Alert(labels={"alertname": name, "severity": severity, "cluster": cluster, "node": node, **labels},
                 annotations={"summary": f"{name} on {node}"}, starts_at=T0, status=status)  # type: ignore[arg-type]


def make_config(receivers: list[dict[str, Any]], **route: Any) -> AlertingConfig:
    root = {"receiver": receivers[0]["name"], "group_wait": "30s", "group_interval": "5m",
            "repeat_interval": "4h", "group_by": ["alertname", "cluster", "node"]}
    root.update(route)
    return parse_config({"receivers": receivers, "route": root, "monitor_url": "http://127.0.0.1:9105",
                         "outbox": {"backoff_initial": "1s", "backoff_max": "60s", "seed": 7}})


class Harness:
    """An engine on simulated time with its records, plus fakes to close."""

    def __init__(self, tmp: Path, config: AlertingConfig, clock: SimulatedClock) -> None:
        self.tmp, self.config, self.clock = tmp, config, clock
        self.records: list[dict[str, Any]] = []
        self.engine = self.open()

    def open(self) -> AlertEngine:
        return AlertEngine(self.config, self.tmp / "alerting.db", self.clock, on_record=self.records.append)

    def restart(self) -> None:
        self.engine.close()
        self.engine = self.open()

    def delivered_fps(self) -> set[str]:
        return {fp for r in self.records if r["kind"] == "notification" and r["status"] == "delivered"
                for fp in r["fingerprints"]}


def receiver(kind: str, fake: Any, name: str | None = None, **extra: Any) -> dict[str, Any]:
    r = {"name": name or kind, "type": kind, "url": fake.url, "timeout": "0.3s", **extra}
    if getattr(fake, "secret", None) and "secret" not in extra:
        r["secret"] = fake.secret
    return r
