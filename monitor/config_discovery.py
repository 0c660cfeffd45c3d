"""The config sections for the rest of a verl deployment: ``file_sd`` and ``ray``.

```yaml
file_sd:                          # Prometheus file_sd_configs: JSON/YAML lists of {targets, labels}
  - files: [/tmp/ray/prom_metrics_service_discovery.json]   # paths or globs (relative: to this file)
    job: ray                      # the `job` label (a group's own `job` label wins)
    interval: 5s                  # scrape interval of every discovered target
    timeout: 3s
    refresh_interval: 5m          # re-read at least this often (a changed file is re-read at once)
    node: gpu-08                  # optional: a fixed node (default: each target's host)
ray:                              # Ray's State API, for dead actors and workers
  dashboard_url: http://127.0.0.1:8265
  token: ...                      # or token_env: NAME; default: as Ray's own clients read it,
                                  # RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token
  interval: 10s
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitor import config_values as value
from monitor.errors import MonitorConfigError
from monitor.sources.file_sd import MAX_TARGETS_PER_FILE, FileSDConfig
from monitor.sources.ray_state import RayConfig

FILE_SD_KEYS = {"files", "job", "interval", "timeout", "refresh_interval", "node", "target_limit"}
RAY_KEYS = {"dashboard_url", "token", "token_env", "interval", "timeout"}

def file_sd(raw: Any, base: Path = Path(".")) -> list[FileSDConfig]:
    """``file_sd`` as a list of entries; a single entry, a path or a list of paths are accepted as short
    forms (``file_sd: targets.json`` = ``[{files: [targets.json]}]``)."""
    if raw is None:
        return []
    if isinstance(raw, (str, dict)):
        raw = [raw]
    if not isinstance(raw, list):
        raise MonitorConfigError("file_sd: expected a list like [{files: [targets.json], job: vllm}]")
    if raw and all(isinstance(e, str) for e in raw):
        raw = [{"files": raw}]
    out = []
    for i, entry in enumerate(raw):
        key = f"file_sd[{i}]"
        if isinstance(entry, str):
            entry = {"files": [entry]}
        entry = value.section(entry, key, "{files: [targets.json], job: vllm}", FILE_SD_KEYS)  # file_sd_configs: the same keys
        files = entry.get("files")
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) and f for f in files):
            raise MonitorConfigError(f"{key}.files: expected a list of file paths or globs, e.g. "
                              "[/tmp/ray/prom_metrics_service_discovery.json]")
        interval = value.duration(entry.get("interval", 5), f"{key}.interval")
        files = [f if Path(f).is_absolute() else str(base / f) for f in files]  # relative: to the config file
        out.append(FileSDConfig(tuple(files), value.text(entry.get("job", "file_sd"), f"{key}.job"), interval,
                                value.duration(entry.get("timeout", min(interval, 3.0)), f"{key}.timeout"),
                                value.duration(entry.get("refresh_interval", 300), f"{key}.refresh_interval"),
                                value.text(entry["node"], f"{key}.node") if entry.get("node") is not None else None,
                                _limit(entry.get("target_limit", MAX_TARGETS_PER_FILE), f"{key}.target_limit")))
    return out


def _limit(raw: Any, key: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise MonitorConfigError(f"{key}: expected a whole number of targets >= 1 (default {MAX_TARGETS_PER_FILE})")
    return raw


def ray(raw: Any) -> RayConfig | None:
    if raw is None:
        return None
    entry = value.section(raw, "ray", "{dashboard_url: http://127.0.0.1:8265}", RAY_KEYS)
    url = entry.get("dashboard_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MonitorConfigError("ray.dashboard_url: expected the Ray dashboard's URL, e.g. http://127.0.0.1:8265")
    if "token" in entry and "token_env" in entry:
        raise MonitorConfigError("ray.token/token_env: give one of them, not both")
    token = entry.get("token")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise MonitorConfigError("ray.token: empty or not a string; give the cluster's token, or remove the key to read "
                          "it as Ray does (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)")
    return RayConfig(url.rstrip("/"), token.strip() if token else None,
                     value.text(entry["token_env"], "ray.token_env") if entry.get("token_env") else None,
                     value.duration(entry.get("interval", 10), "ray.interval"), value.duration(entry.get("timeout", 5), "ray.timeout"))
