"""The one duration parser of the project: alerting's config and correlation rules and the monitor's
rules, config and API all read ``30s``, ``5m``, ``1h30m``, ``1d``, ``250ms`` or plain seconds through it
(the monitor imports it; ``alerting`` may not import ``monitor``)."""

from __future__ import annotations

import re
from typing import Any

from alerting.errors import AlertingConfigError
from alerting.safe_config import short

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def is_duration(text: str) -> bool:
    """True when ``text`` is a duration string (``1h30m``), not a plain number."""
    parts = _DURATION.findall(text.strip())
    return bool(parts) and "".join(n + u for n, u in parts) == text.strip()


def parse_duration(value: Any, key: str) -> float:
    """Seconds from a Prometheus-style duration or a plain number; AlertingConfigError naming ``key`` otherwise."""
    if isinstance(value, bool):
        raise AlertingConfigError(f"{key}: expected a duration like 30s, 5m or 1h30m, got {value!r}")
    if isinstance(value, int | float):
        if not 0 <= value < float("inf"):
            raise AlertingConfigError(f"{key}: duration must be finite and not negative, got {short(value)}")
        return float(value)
    if not isinstance(value, str) or not is_duration(value):
        raise AlertingConfigError(f"{key}: expected a duration like 30s, 5m or 1h30m, got {short(value)}")
    total = sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(value.strip()))
    if total == float("inf"):
        raise AlertingConfigError(f"{key}: duration too large, got {short(value)}")
    return total


def positive_duration(value: Any, key: str) -> float:
    """A duration > 0: a zero interval makes a loop spin."""
    seconds = parse_duration(value, key)
    if seconds <= 0:
        raise AlertingConfigError(f"{key}: must be a duration > 0 (e.g. 30s), got {short(value)}")
    return seconds
