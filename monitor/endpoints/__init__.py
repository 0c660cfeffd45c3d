"""The monitor's HTTP surface: one listener and its guards, the JSON API and webhook, /healthz, /metrics,
/targets (the console's pages are ``monitor/web/``)."""
