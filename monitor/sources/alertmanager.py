"""Alertmanager webhook receiver payload (version "4") -> our Alerts, so alerts Prometheus already
evaluates are correlated and routed with ours. Severities outside P0-P3 are mapped: the shared
catalogue's severity for a known alertname, else critical->P1, warning->P2, anything else P3.
Scrape plumbing labels (``alerting.model.NON_IDENTITY_LABELS``) are dropped after ``node`` is taken
from ``instance``, so Prometheus' alert for an outage has the labels and fingerprint of the monitor's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from alerting.catalogue import severities
from alerting.model import SEVERITIES, Alert, identity_labels
from monitor.model import resolve_node

CATALOGUE = severities()  # alertname -> severity, from alerting/catalogue.yaml
_GENERIC = {"critical": "P1", "page": "P1", "error": "P2", "warning": "P2"}


class PayloadError(ValueError):
    pass


def _time(text: Any) -> float | None:
    if not text or str(text).startswith("0001-01-01"):
        return None
    s = str(text).replace("Z", "+00:00")
    if "." in s:  # Go writes nanoseconds; fromisoformat takes at most microseconds
        head, frac = s.split(".", 1)
        digits = "".join(ch for ch in frac if ch.isdigit())
        s = f"{head}.{digits[:6]}{frac[len(digits):]}"
    return datetime.fromisoformat(s).timestamp()


def _str_map(value: Any, where: str) -> dict[str, str]:
    """Labels/annotations: a JSON object of scalars (Alertmanager sends strings; numbers are tolerated)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{where}: expected an object of name: string, got {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if isinstance(v, dict | list):
            raise PayloadError(f"{where}.{str(k)[:40]}: expected a string, got {type(v).__name__}")
        out[str(k)] = "" if v is None else str(v)
    return out


def parse_webhook(payload: Any, cluster: str, node_of_instance: dict[str, str] | None = None) -> list[Alert]:
    """``node_of_instance`` maps a target address the monitor scrapes itself (``host:port``) to the
    ``node:`` configured for it: Prometheus, not knowing that name, labels the same trainer with the host
    part of its address, and without the mapping one outage would be two alerts. Raises PayloadError
    (one line, the offending field) for anything but a webhook payload."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise PayloadError("expected an Alertmanager webhook payload with an 'alerts' list (version 4)")
    out = []
    for i, a in enumerate(payload["alerts"]):
        if not isinstance(a, dict) or not isinstance(a.get("labels"), dict) or "alertname" not in a["labels"]:
            raise PayloadError(f"alerts[{i}]: needs labels with an alertname")
        labels = _str_map(a["labels"], f"alerts[{i}].labels")
        annotations = _str_map(a.get("annotations"), f"alerts[{i}].annotations")
        sev = labels.get("severity", "")
        if sev not in SEVERITIES:
            labels["severity"] = CATALOGUE.get(labels["alertname"], _GENERIC.get(sev.lower(), "P3"))
        labels.setdefault("cluster", cluster)
        instance = labels.get("instance", "")
        named = (node_of_instance or {}).get(instance)
        if named and labels.get("node", "") in ("", resolve_node({"instance": instance})):
            labels["node"] = named
        labels["node"] = resolve_node(labels)
        # job, instance, prometheus, pod, ...: how Prometheus scraped it, not what is wrong; the monitor's
        # own alerts never carry them, and with them one outage would be two alerts (and two pages)
        labels = identity_labels(labels)
        for key in ("startsAt", "endsAt", "status", "generatorURL"):
            if a.get(key) is not None and not isinstance(a[key], str):
                raise PayloadError(f"alerts[{i}].{key}: expected a string, got {type(a[key]).__name__}")
        try:
            starts, ends = _time(a.get("startsAt")), _time(a.get("endsAt"))
        except (ValueError, OverflowError, OSError) as exc:
            raise PayloadError(f"alerts[{i}].startsAt/endsAt: not RFC 3339 ({exc})") from exc
        status = "resolved" if a.get("status") == "resolved" else "firing"
        out.append(Alert(labels=labels, annotations=annotations,
                         starts_at=starts or 0.0, ends_at=ends if status == "resolved" else None, status=status,
                         generator_url=str(a.get("generatorURL") or "")))
    return out
