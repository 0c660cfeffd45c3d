"""Rules and their evaluation: rule files loaded (the YAML lives in ``monitor/rules/``), how much history
each needs, bound to series, fed every sample, and judged by the detectors (``monitor/detectors/``) on each
tick."""
