"""Monitor-health dashboard: the sidecar's own /metrics (verl_monitor_*) and its alerting pipeline
(verl_alerting_*), names fixed by the cross-team contract."""

from __future__ import annotations

from .grafana import SEL, Dashboard, Panel, PanelQuery, Row, rate, standard_variables, zero_if_empty

UP = [{"type": "value", "options": {"0": {"text": "down", "color": "red", "index": 0},
                                    "1": {"text": "up", "color": "green", "index": 1}}}]


def overview() -> Row:
    return Row("Monitor", [
        Panel("stat", "Targets up", "Scrape targets of the monitor that answered their last scrape.",
              "none", [PanelQuery(f"sum(verl_monitor_target_up{{{SEL}}})", "up"),
                       PanelQuery(f"count(verl_monitor_target_up{{{SEL}}})", "configured")], width=6, height=4,
              options={"colorMode": "none"}),
        Panel("stat", "Series tracked", "Series held in the monitor's store (bounded; extra series are "
              "dropped and counted).", "none", [PanelQuery(f"sum(verl_monitor_series{{{SEL}}})")],
              width=6, height=4, options={"colorMode": "none"}),
        Panel("stat", "Evaluation lag", "How far rule evaluation trails the newest sample.", "s",
              [PanelQuery(f"max(verl_monitor_eval_lag_seconds{{{SEL}}})")], width=6, height=4,
              thresholds=[(None, "green"), (30, "orange"), (120, "red")]),
        Panel("stat", "Firing alerts", "Alerts the monitor currently has firing.", "none",
              [PanelQuery(zero_if_empty(f"sum(verl_monitor_alerts_firing{{{SEL}}})"))], width=6, height=4,
              thresholds=[(None, "green"), (1, "red")]),
    ])


def ingest() -> Row:
    return Row("Ingest", [
        Panel("timeseries", "Samples ingested", "Samples per second accepted from each source "
              "(scrape, prometheus API, NVML, dmon, JSONL, webhook).", "cps",
              [PanelQuery(rate("verl_monitor_samples_ingested_total", by="source"), "{{source}}")], width=8),
        Panel("timeseries", "Scrape errors", "Failed scrapes and malformed input per second, by target "
              "and reason (never fatal; each one is counted here).", "cps",
              [PanelQuery(zero_if_empty(rate("verl_monitor_scrape_errors_total", by="target, reason"), "reason"),
                      "{{target}} {{reason}}")], width=8, thresholds=[(None, "green"), (0.01, "red")]),
        Panel("timeseries", "Scrape duration", "Duration of the last scrape of each target.", "s",
              [PanelQuery(f"max by (target) (verl_monitor_scrape_duration_seconds{{{SEL}}})", "{{target}}")],
              width=8),
        Panel("timeseries", "Target up", "Scrape health of each target over time.", "none",
              [PanelQuery(f"max by (target) (verl_monitor_target_up{{{SEL}}})", "{{target}}")], width=8,
              mappings=UP, custom={"lineInterpolation": "stepAfter"}, min=0, max=1),
        Panel("timeseries", "Series dropped", "Series refused per second by reason (label explosion, "
              "non-finite values, limits).", "cps",
              [PanelQuery(zero_if_empty(rate("verl_monitor_series_dropped_total", by="reason"), "reason"),
                      "{{reason}}")], width=8),
        Panel("timeseries", "Series tracked", "Series in the monitor's store over time.", "none",
              [PanelQuery(f"sum(verl_monitor_series{{{SEL}}})", "series")], width=8),
    ])


def detection() -> Row:
    hist = "verl_monitor_detector_eval_seconds_bucket"
    return Row("Detection", [
        Panel("timeseries", "Detector evaluation time", "p50 / p99 of one detector update (histogram).",
              "s", [PanelQuery(f"histogram_quantile(0.5, {rate(hist, by='le')})", "p50"),
                    PanelQuery(f"histogram_quantile(0.99, {rate(hist, by='le')})", "p99")], width=8),
        Panel("timeseries", "Detector evaluations", "Detector updates per second.", "cps",
              [PanelQuery(rate("verl_monitor_detector_eval_seconds_count"), "evaluations")], width=8),
        Panel("timeseries", "Evaluation lag", "How far rule evaluation trails the newest sample.", "s",
              [PanelQuery(f"max(verl_monitor_eval_lag_seconds{{{SEL}}})", "lag")], width=8),
        Panel("timeseries", "Firing alerts by severity", "Alerts firing in the monitor by severity.", "none",
              [PanelQuery(zero_if_empty(f"sum by (severity) (verl_monitor_alerts_firing{{{SEL}}})", "severity"),
                      "{{severity}}")], width=12, stacked=True),
        Panel("table", "Firing alerts", "Firing alerts by alertname and severity.", "none",
              [PanelQuery(zero_if_empty(f"sum by (alertname, severity) (verl_monitor_alerts_firing{{{SEL}}} > 0)",
                                    "alertname"), instant=True)], width=12),
    ])


def alerting() -> Row:
    return Row("Alerting pipeline", [
        Panel("timeseries", "Notifications", "Notification attempts per second by receiver and outcome.",
              "cps", [PanelQuery(zero_if_empty(rate("verl_alerting_notifications_total", by="receiver, status"),
                                           "status"), "{{receiver}} {{status}}")], width=8),
        Panel("timeseries", "Outbox depth", "Notifications waiting in the durable outbox; a growing "
              "outbox means a receiver keeps failing.", "none",
              [PanelQuery(f"sum(verl_alerting_outbox_depth{{{SEL}}})", "pending")], width=8,
              thresholds=[(None, "green"), (50, "red")], threshold_style="dashed"),
        Panel("timeseries", "Delivery retries", "Retries per second by receiver (rate limits, 5xx).", "cps",
              [PanelQuery(zero_if_empty(rate("verl_alerting_delivery_retries_total", by="receiver"), "receiver"),
                      "{{receiver}}")], width=8),
        Panel("timeseries", "Incidents", "Incidents opened by correlation rule in the interval.", "none",
              [PanelQuery(zero_if_empty("sum by (rule) (increase(verl_alerting_incidents_total"
                                    f"{{{SEL}}}[$__rate_interval]))", "rule"), "{{rule}}")], width=8),
        Panel("timeseries", "Digests and template failures", "Messages folded into digests to respect "
              "robot rate limits, and templates that failed to render (fallback text was sent).", "cps",
              [PanelQuery(zero_if_empty(rate("verl_alerting_digests_total", by="receiver"), "receiver"),
                      "digests {{receiver}}"),
               PanelQuery(zero_if_empty(rate("verl_alerting_template_failures_total", by="receiver"), "receiver"),
                      "template failures {{receiver}}")], width=8),
    ])


def dashboard() -> Dashboard:
    return Dashboard(
        uid="verl-monitor",
        title="Verl Monitor Health",
        description="Health of the verl-monitor sidecar: ingest, detectors, alerts and notification delivery.",
        tags=["verl", "monitor"],
        variables=standard_variables("verl_monitor_series"),
        rows=[overview(), ingest(), detection(), alerting()],
        time_from="now-6h",
    )
