"""The alerting stage's own Prometheus metrics (names fixed by the cross-team contract)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class AlertingMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        # Without a registry the metrics still count (tests read them) but are exported nowhere.
        reg = registry if registry is not None else CollectorRegistry()
        self.outbox_depth = Gauge("verl_alerting_outbox_depth", "Notifications waiting in the outbox.",
                                  registry=reg)
        self.notifications = Counter("verl_alerting_notifications", "Delivery attempt outcomes.",
                                     ["receiver", "status"], registry=reg)
        self.retries = Counter("verl_alerting_delivery_retries", "Deliveries scheduled for another attempt.",
                               ["receiver"], registry=reg)
        self.incidents = Counter("verl_alerting_incidents", "Incidents formed by correlation rules.", ["rule"],
                                 registry=reg)
        self.template_failures = Counter("verl_alerting_template_failures",
                                         "User templates that failed and fell back to the built-in one.",
                                         ["receiver"], registry=reg)
        self.log_problems = Counter("verl_alerting_transition_log_problems",
                                    "Transition log rows that did not parse (bad_row, skipped) and saved places "
                                    "the log no longer held (rewound: re-read from its head).", ["kind"],
                                    registry=reg)
        self.digests = Counter("verl_alerting_digests", "Digests sent instead of single messages (rate limit).",
                               ["receiver"], registry=reg)
