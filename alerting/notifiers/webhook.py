"""JSON receivers: a generic webhook gets Alertmanager's webhook payload (version 4,
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config); an Alertmanager gets our
alerts through its API v2 (``POST /api/v2/alerts``, a list of postable alerts). 2xx delivered; 5xx, 429,
timeouts retried; other 4xx permanent.

Alertmanager's contract for clients (https://prometheus.io/docs/alerting/latest/clients/): a client
re-sends its firing alerts regularly, and an alert whose ``endsAt`` passes -- or, without ``endsAt``, one
not re-sent within ``resolve_timeout`` -- is resolved. So, like Prometheus (resend_delay 1m, endsAt =
now + 3 x resend), firing alerts carry ``endsAt`` = send time + 3 x the receiver's ``resend_interval``
and the router re-posts them every ``resend_interval``; resolved ones carry their real ``endsAt``."""

from __future__ import annotations

from alerting.model import Alert, Notification, rfc3339
from alerting.notifiers.base import Delivery, Notifier
from alerting.templates import Rendered


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    if not dicts:
        return {}
    return {k: v for k, v in dicts[0].items() if all(d.get(k) == v for d in dicts[1:])}


def webhook_payload(n: Notification, external_url: str = "") -> dict[str, object]:
    return {
        "version": "4", "groupKey": n.group_key, "truncatedAlerts": 0, "status": n.status, "receiver": n.receiver,
        "groupLabels": dict(n.group_labels), "commonLabels": _common([a.labels for a in n.alerts]),
        "commonAnnotations": _common([a.annotations for a in n.alerts]), "externalURL": external_url,
        "alerts": [a.to_json() for a in n.alerts],
    }


class _JsonNotifier(Notifier):
    def _result(self, got: tuple[int, object] | Delivery) -> Delivery:
        if isinstance(got, Delivery):
            return got
        status, _ = got
        if 200 <= status < 300:
            return Delivery(True)
        return Delivery.permanent(f"{self.kind}: HTTP {status} from receiver", status)


class WebhookNotifier(_JsonNotifier):
    kind = "webhook"
    external_url = ""

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        for n in notes:  # JSON receivers need no digest: each notification is its own payload
            result = self._result(self.post(self.cfg.url, webhook_payload(n, self.external_url)))
            if not result.ok:
                return result
        return Delivery(True)


class AlertmanagerNotifier(_JsonNotifier):
    kind = "alertmanager"
    external_url = ""  # the monitor's API (monitor_url): generatorURL for alerts that have none

    def postable(self, a: Alert, sent_at: float) -> dict[str, object]:
        """One alert in API v2's ``postableAlert`` shape, as of ``sent_at`` (wall time)."""
        resend = self.cfg.resend_interval_s or 60.0
        ann = dict(a.annotations)
        if not ann.get("description"):  # incidents: root cause and suggestion are the description
            ann["description"] = " ".join(v for v in (ann.get("summary"), ann.get("root_cause"),
                                                      ann.get("suggestion"), ann.get("runbook")) if v)
        out: dict[str, object] = {
            "labels": dict(a.labels), "annotations": {k: v for k, v in ann.items() if v},
            "startsAt": rfc3339(a.starts_at or sent_at),
            "endsAt": rfc3339(a.ends_at if a.status == "resolved" and a.ends_at else
                              sent_at if a.status == "resolved" else sent_at + 3 * resend),
        }
        url = a.generator_url or (f"{self.external_url.rstrip('/')}/api/v1/alerts/{a.fingerprint}"
                                  if self.external_url else "")
        if url:
            out["generatorURL"] = url
        return out

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        # endsAt is measured from now, not from when the notification was queued: a post that waited
        # in the outbox for a retry must still outlive the next re-post.
        sent_at = max([self.sign_clock.now()] + [n.created_at for n in notes])
        latest: dict[str, Alert] = {}
        for n in notes:  # a digest may carry one alert twice (firing, then resolved): the newest wins
            for a in n.alerts:
                latest[a.fingerprint] = a
        alerts = [self.postable(a, sent_at) for a in latest.values()]
        return self._result(self.post(self.cfg.url.rstrip("/") + "/api/v2/alerts", alerts))
