"""JSON receivers: a generic webhook gets Alertmanager's webhook payload (version 4,
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config); an Alertmanager gets our
alerts through its API v2 (``POST /api/v2/alerts``, a list of postable alerts). 2xx delivered; 5xx, 429,
timeouts retried; other 4xx permanent."""

from __future__ import annotations

from alerting.model import Notification
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

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        alerts = [{k: v for k, v in a.to_json().items() if k in ("labels", "annotations", "startsAt", "endsAt",
                                                                    "generatorURL")}
                  for n in notes for a in n.alerts]
        return self._result(self.post(self.cfg.url.rstrip("/") + "/api/v2/alerts", alerts))
