"""The monitor reads durations with alerting's parser (``alerting/durations.py``, the project's one):
``1h30m`` means the same in a monitor rule as in a correlation rule. ``DurationError`` is the error the
monitor's callers catch (a ``MonitorConfigError``: one line naming the key)."""

from __future__ import annotations

from typing import Any

from alerting import durations
from alerting.errors import AlertingConfigError
from monitor.errors import MonitorConfigError

is_duration = durations.is_duration


class DurationError(MonitorConfigError):
    pass


def parse_duration(value: Any, where: str) -> float:
    """Plain numbers pass through unchecked: each monitor caller states its own range (``> 0``,
    ``>= 1 step``) in its message, so a NaN or negative reaches the check that names the bound."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return durations.parse_duration(value, where)
    except AlertingConfigError as exc:
        raise DurationError(str(exc)) from None
