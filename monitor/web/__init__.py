"""The monitor's web console: server-rendered pages over the JSON API's own logic (``monitor.endpoints.api``)."""
