"""Durations as Prometheus writes them (30s, 5m, 1h, 1d) or plain seconds."""

from __future__ import annotations

import re
from typing import Any

DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    pass


def parse_duration(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise DurationError(f"{where}: expected a duration like 30s, 5m, 1h, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    m = DURATION_RE.match(str(value))
    if not m:
        raise DurationError(f"{where}: expected a duration like 30s, 5m, 1h, got {value!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]
