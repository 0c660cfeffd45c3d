"""Generators of the committed Grafana dashboards (python -m dashboards.gen)."""
