"""Reading one value of the daemon's config: a duration, a section, a string, a flag, a whole number, a size.
Every error is one ``MonitorConfigError`` line that names the key and what was expected; ``config.py``, the
sections parsed beside it (``config_discovery.py``, ``heartbeat.py``) and the flags of ``run_flags.py`` all
read through here, so they share one error style without handing helpers to each other."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from alerting.safe_config import number, short, unknown_key
from monitor.durations import DurationError, parse_duration
from monitor.errors import MonitorConfigError

_SIZE_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


def duration(raw: Any, key: str) -> float:
    """A duration > 0 and finite: 0 makes a loop spin, a negative or NaN one never ends."""
    try:
        seconds = parse_duration(raw, key)
    except DurationError as exc:
        raise MonitorConfigError(f"{key}: expected a duration like 30s, 5m, 1h, got {short(raw)}") from exc
    if not 0 < seconds < float("inf"):
        raise MonitorConfigError(f"{key}: must be a duration > 0 (e.g. 500ms, 5s), got {short(raw)}")
    return seconds


def section(raw: Any, key: str, hint: str, allowed: Collection[str]) -> dict[str, Any]:
    """A mapping whose keys are all ``allowed`` (an unknown one is an error with a did-you-mean)."""
    if not isinstance(raw, dict):
        raise MonitorConfigError(f"{key}: expected a mapping like {hint}, got {short(raw)}")
    bad = unknown_key(raw, allowed)
    if bad:
        raise MonitorConfigError(f"{key}.{bad[0]}: unknown key; {bad[1]}")
    return raw


def listing(raw: Any, key: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MonitorConfigError(f"{key}: expected a list, got {short(raw)}")
    return raw


def text(raw: Any, key: str) -> str:
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool) or raw == "":
        raise MonitorConfigError(f"{key}: expected a non-empty string, got {short(raw)}")
    return str(raw)


def flag(raw: Any, key: str) -> bool:
    if not isinstance(raw, bool):
        raise MonitorConfigError(f"{key}: expected true or false, got {short(raw)}")
    return raw


def integer(raw: Any, key: str, lo: int = 1) -> int:
    try:
        return int(number(raw, key, integer=True, lo=lo))
    except ValueError as exc:
        raise MonitorConfigError(str(exc)) from None


def size(raw: Any, key: str) -> int:
    """Bytes: an integer or a number with B/KB/MB/GB/KiB/MiB/GiB (Prometheus' body_size_limit units)."""
    if isinstance(raw, bool):
        raise MonitorConfigError(f"{key}: expected a size like 16MiB or a byte count, got {raw!r}")
    raw_text = str(raw).strip()
    num = raw_text.rstrip("BbKkMmGgIi")
    unit = raw_text[len(num):].upper()
    try:
        value = float(num) * _SIZE_UNITS[unit]
    except (KeyError, ValueError):
        raise MonitorConfigError(f"{key}: expected a size like 16MiB or a byte count, got {raw!r}") from None
    if value < 0 or value != value or value > 2**40:
        raise MonitorConfigError(f"{key}: must be between 0 (no limit) and 1TiB, got {raw!r}")
    return int(value)


def path(base: Path, raw: Any, key: str, must_exist: bool = False) -> Path:
    if not isinstance(raw, str) or not raw:
        raise MonitorConfigError(f"{key}: expected a file path string, got {short(raw)}")
    p = Path(raw) if Path(raw).is_absolute() else base / raw
    if must_exist and not p.is_file():
        raise MonitorConfigError(f"{key}: file {short(str(p), 120)} does not exist; fix the path")
    return p


def count(raw: Any, key: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise MonitorConfigError(f"{key}: expected a whole number >= 0 (0 = no limit), got {raw!r}")
    return raw
