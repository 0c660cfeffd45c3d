"""Data passed between pipeline stages: alerts in Alertmanager's shape, incidents, and
notification records. The monitor produces ``Alert``s; everything in ``alerting`` consumes them.

Times are float Unix seconds taken from the injected clock (the data's own timestamps in replay);
``to_json`` renders them as RFC 3339 the way Alertmanager does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

Status = Literal["firing", "resolved"]
SEVERITIES = ("P0", "P1", "P2", "P3")


def rfc3339(ts: float | None) -> str:
    """Alertmanager's zero time for 'not set', RFC 3339 with a Z otherwise."""
    if ts is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


# Labels that say *how* a sample was collected (scrape job, address, the Prometheus or pod that carried
# it, exporter bookkeeping) rather than *what* is wrong. They never count towards an alert's identity:
# one outage seen by the monitor's own scrape and by Prometheus -> Alertmanager -> webhook is one alert.
NON_IDENTITY_LABELS = frozenset({
    "__name__", "job", "instance", "prometheus", "prometheus_replica", "endpoint", "pod", "container",
    "target", "exported_job", "exported_instance",
    # dcgm-exporter's per-device bookkeeping: `gpu` (kept) already says which device
    "Hostname", "hostname", "UUID", "pci_bus_id", "device", "DCGM_FI_DRIVER_VERSION", "modelName",
    # Ray's per-process bookkeeping on every ray_* series (its node is `node`, from the address)
    "SessionName", "Version", "otel_scope_name", "otel_scope_schema_url", "otel_scope_version", "IsHeadNode",
    "RayNodeType", "ip", "NodeAddress", "WorkerId",
})


def identity_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in NON_IDENTITY_LABELS}


def fingerprint(labels: dict[str, str]) -> str:
    """Stable id of an alert: sha256 over its sorted identity name=value pairs, first 16 hex digits.

    The pairs are joined with ``\x1f``, which is unambiguous only while no value holds ``\x1f`` and no
    name holds ``=`` or ``\x1f``; otherwise (a webhook sender's crafted label) the pairs are hashed
    length-prefixed behind a 0xFF byte, which never occurs in UTF-8, so the two encodings cannot meet
    either. Every fingerprint already stored (all from plain labels) stays what it was."""
    keys = sorted(k for k in labels if k not in NON_IDENTITY_LABELS)
    if any("\x1f" in labels[k] or "\x1f" in k or "=" in k for k in keys):
        raw = bytearray(b"\xff")
        for k in keys:
            for part in (k.encode(), labels[k].encode()):
                raw += len(part).to_bytes(4, "big") + part
        return hashlib.sha256(bytes(raw)).hexdigest()[:16]
    text = "\x1f".join(f"{k}={labels[k]}" for k in keys)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Alert:
    """One alert instance; ``labels`` always hold ``alertname`` and ``severity`` (P0-P3)."""

    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    starts_at: float = 0.0
    ends_at: float | None = None
    status: Status = "firing"
    value: float | None = None  # the observed value that triggered it, for templates and suggestions
    generator_url: str = ""
    # The PNG the monitor rendered for it (a local path): notifiers that send images read it from here,
    # so the plot travels with the alert. Not part of Alertmanager's shape (``to_json``).
    plot_file: str = ""

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "P3")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": rfc3339(self.starts_at),
            "endsAt": rfc3339(self.ends_at),
            "generatorURL": self.generator_url,
            "fingerprint": self.fingerprint,
        }

    def to_state(self) -> dict[str, Any]:
        """``to_json`` plus what only this process needs back after a restart (``alert_from_json`` reads it)."""
        return dict(self.to_json(), value=self.value, plotFile=self.plot_file)


def parse_rfc3339(text: str | None) -> float | None:
    """Inverse of ``rfc3339``: Alertmanager's zero time (or empty) means 'not set'."""
    if not text or text.startswith("0001-01-01"):
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def alert_from_json(data: dict[str, Any]) -> Alert:
    """An ``Alert`` from Alertmanager's alert shape (``to_json`` output, webhook or API v2 alerts)."""
    labels = {str(k): str(v) for k, v in (data.get("labels") or {}).items()}
    if "alertname" not in labels:
        raise ValueError("alert has no labels.alertname")
    annotations = {str(k): str(v) for k, v in (data.get("annotations") or {}).items()}
    value = data.get("value", annotations.get("value"))
    try:
        value = float(value) if value is not None else None
    except (TypeError, ValueError):
        value = None
    ends = parse_rfc3339(data.get("endsAt"))
    status = data.get("status") or ("resolved" if ends is not None else "firing")
    return Alert(
        labels=labels,
        annotations=annotations,
        starts_at=parse_rfc3339(data.get("startsAt")) or 0.0,
        ends_at=ends,
        status="resolved" if status == "resolved" else "firing",
        value=value,
        generator_url=str(data.get("generatorURL") or ""),
        plot_file=str(data.get("plotFile") or ""),
    )


@dataclass
class Notification:
    """One routed group flush for one receiver: what the outbox stores and a notifier renders.
    ``fingerprints`` cover the alerts and, for incidents, the member alerts travelling inside them."""

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    status: Status
    alerts: list[Alert]
    fingerprints: list[str]
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "receiver": self.receiver, "group_key": self.group_key, "group_labels": dict(self.group_labels),
            # ``to_state``, not ``to_json``: the outbox stores this and the notifier reads it back, so the
            # plot's path (``plotFile``) must survive the round trip or WeCom gets no image.
            "status": self.status, "alerts": [a.to_state() for a in self.alerts],
            "fingerprints": list(self.fingerprints), "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Notification:
        return cls(d["receiver"], d["group_key"], dict(d["group_labels"]), d["status"],
                   [alert_from_json(a) for a in d["alerts"]], list(d["fingerprints"]), float(d["created_at"]))
