"""Daemon config (YAML). Every error is one line naming the key and the fix; unknown keys at any level
are errors with a did-you-mean, every duration must be > 0, numbers finite and in range.

```yaml
cluster: llama3-1k-gpu            # `cluster` label on every alert (default "default")
listen: 127.0.0.1:9105            # own /metrics, /healthz, JSON API; 127.0.0.1 unless you say otherwise
bearer_token_env: MONITOR_TOKEN   # or bearer_token: ...; required on /api/* when set (empty: an error)
state_db: ./verl-monitor/state.db # alert states (SQLite WAL); plots go to <state_db dir>/plots
external_url: http://mon:9105     # how links to plots are written (default http://<listen>)
grafana_url: http://grafana:3000   # optional: console links to the shipped dashboards (prometheus_url: to queries)
eval_interval: 500ms
rules: [my-rules.yaml]            # default: monitor/rules/default.yaml
notify_config: alerting.yaml      # alerting.engine config; omit to only record alerts
reward_outliers: true             # attach the trainer's top-3 anomalous prompts to RewardDistributionDrift
targets:                          # Prometheus/OpenMetrics text endpoints
  - {name: trainer, url: "http://127.0.0.1:8000/metrics", node: gpu-08, job: verl, interval: 5s, timeout: 3s,
     api_token_env: TRAINER_TOKEN}  # sent to the trainer's /api/v1/reward_outliers (its metrics.api_token)
  - {name: dcgm, url: "http://127.0.0.1:9400/metrics", job: dcgm}
prometheus:                       # optional: query a Prometheus server instead of / besides scraping
  {url: "http://127.0.0.1:9090", queries: ['{__name__=~"verl_.*|DCGM_FI_.*"}'], step: 15s, interval: 1m, chunk: 1h, lookback: 10m}
jsonl: [{path: logs/exp.jsonl, node: gpu-08}]   # volcengine verl `file` logger output; also total_steps
                                                # (trainer.total_training_steps), down_after (10m),
                                                # down_after_steps (3), export (re-export on /metrics),
                                                # resolved_config (.hydra/config.yaml: values for runbooks),
                                                # checkpoint_dir (trainer.default_local_dir: tracker, saves)
dmon: [{path: dmon.log, node: gpu-08}]          # or {command: [nvidia-smi, dmon, -s, pucvmet, -o, DT]}
nvml: {enabled: false, interval: 5s}            # local NVML sampling when a GPU exists
limits: {max_series: 20000, max_series_per_metric: 2000, capacity: 4096, stale_after: 5m, evict_after: 1h}
retention: 24h                    # resolved alerts/incidents and sent notifications are forgotten after this
console: true                     # print alert transitions to stdout (default: on without notify_config)
file_sd: [{files: [/tmp/ray/prom_metrics_service_discovery.json], job: ray}]   # monitor/config_discovery.py
ray: {dashboard_url: "http://127.0.0.1:8265"}   # Ray's State API (token as Ray's clients read it)
replica: a                        # HA pair (ha.py); heartbeat: {url_env: HB_URL, interval: 1m} (heartbeat.py)
```
Per target also ``body_size_limit`` (bytes, or ``512KiB``/``16MB``; default 32MiB, 0 = none),
``sample_limit`` (samples per scrape), ``label_limit`` (labels per sample, the exposition's own),
``label_value_length_limit`` (characters per label value; all three default 0 = none): exceeding any
fails that scrape as a whole (``up`` 0, the reason counted and logged per target), as in Prometheus.
``honor_timestamps: false`` stamps every sample with the scrape time instead of the target's stamp.

``run_flags.default_config`` is what ``verl-monitor run`` uses without ``--config``: the trainer's documented
port 127.0.0.1:8000, the default rules, alerts printed to the terminal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerting.safe_config import UnsafeYAML, load_yaml_file, short, unknown_key
from monitor import config_discovery
from monitor import config_values as value
from monitor.errors import MonitorConfigError
from monitor.heartbeat import HEARTBEAT_KEYS, HeartbeatConfig, parse_heartbeat
from monitor.series.store import StoreLimits
from monitor.sources.base import FileSourceConfig
from monitor.sources.file_sd import FileSDConfig
from monitor.sources.prom_api import PromAPIConfig
from monitor.sources.prom_text import Target
from monitor.sources.ray_state import RayConfig

TOP_KEYS = {"cluster", "listen", "bearer_token", "bearer_token_env", "state_db", "external_url", "eval_interval",
            "rules", "notify_config", "reward_outliers", "targets", "prometheus", "jsonl", "dmon", "nvml", "limits",
            "console", "retention", "file_sd", "file_sd_configs", "ray", "grafana_url", "prometheus_url", "replica",
            "heartbeat"}
DEFAULT_TARGET = "http://127.0.0.1:8000/metrics"  # verl-train --metrics-port 8000, as the README runs it
# allowed keys of each nested section (an unknown key is an error with a did-you-mean)
SECTION_KEYS = {
    "targets": {"name", "url", "node", "job", "interval", "timeout", "api_token", "api_token_env",
                "body_size_limit", "sample_limit", "label_limit", "label_value_length_limit", "honor_timestamps"},
    "prometheus": {"url", "queries", "step", "interval", "chunk", "lookback", "timeout"},
    "jsonl": {"path", "node", "total_steps", "down_after", "down_after_steps", "export", "resolved_config",
              "checkpoint_dir"},
    "dmon": {"path", "command", "node"},
    "nvml": {"enabled", "interval"},
    "limits": {"max_series", "max_series_per_metric", "capacity", "stale_after", "evict_after"},
    "file_sd": config_discovery.FILE_SD_KEYS,
    "ray": config_discovery.RAY_KEYS,
    "heartbeat": HEARTBEAT_KEYS,
}
MAX_POINTS_PER_QUERY = 11000  # Prometheus refuses longer query_range answers; step*this bounds each chunk


_JSONL_KEYS = SECTION_KEYS["jsonl"]


@dataclass
class MonitorConfig:
    path: Path
    cluster: str = "default"
    host: str = "127.0.0.1"
    port: int = 9105
    bearer_token: str | None = None
    state_db: Path = Path("verl-monitor/state.db")
    external_url: str | None = None
    grafana_url: str | None = None  # the console links each alert to its panel on the shipped dashboards there
    prometheus_url: str | None = None  # ... and its rule's query to this Prometheus' graph page
    eval_interval: float = 0.5  # longest wait between ticks; new samples bring the tick forward to a fifth of it
    rules: list[Path] = field(default_factory=list)
    notify_config: Path | None = None
    reward_outliers: bool = True
    targets: list[Target] = field(default_factory=list)
    prometheus: PromAPIConfig | None = None
    jsonl: list[FileSourceConfig] = field(default_factory=list)
    dmon: list[FileSourceConfig] = field(default_factory=list)
    nvml: bool = False
    nvml_interval: float = 5.0
    limits: StoreLimits = field(default_factory=StoreLimits)
    retention: float = 24 * 3600.0
    console: bool | None = None  # None: print alerts to stdout when they are not sent anywhere
    from_file: bool = True  # False for `verl-monitor run` without --config
    target_tokens: dict[str, str] = field(default_factory=dict, repr=False)  # target name -> trainer API token
    file_sd: list[FileSDConfig] = field(default_factory=list)  # service discovery (config_discovery.py)
    ray: RayConfig | None = None  # Ray's State API: dead actors and workers
    replica: str = ""  # which monitor of an HA pair (verl_monitor_info{replica}); never an alert label
    heartbeat: HeartbeatConfig | None = field(default=None, repr=False)  # dead man's switch URL (a token)

    def fix(self, key: str) -> str:
        """Where the user changes ``key``: the config file, or a flag / the working directory without one."""
        if self.from_file:
            return f"set '{key}' in {self.path}"
        return {"listen": "pass --listen HOST:PORT", "state_db": "run from a writable directory "
                "(state goes to ./verl-monitor/state.db) or set 'state_db' in a --config file"}.get(
                    key, f"set '{key}' in a --config file")

    @property
    def prints_alerts(self) -> bool:
        return self.console if self.console is not None else self.notify_config is None

    @property
    def plots_dir(self) -> Path:
        return self.state_db.parent / "plots"



def _section(raw: Any, key: str, hint: str) -> dict[str, Any]:
    return value.section(raw, key, hint, SECTION_KEYS[key.split("[")[0]])


def _token(doc: dict[str, Any], key: str) -> str | None:
    """``bearer_token`` or ``bearer_token_env`` (``api_token``/``api_token_env`` on targets): an empty
    token is an error, never "auth off" (leave the key out for that)."""
    name = key.rsplit(".", 1)[-1]
    value_key, env_key = (("bearer_token", "bearer_token_env") if name == "bearer_token" else
                          ("api_token", "api_token_env"))
    prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
    if value_key in doc and env_key in doc:
        raise MonitorConfigError(f"{prefix}{value_key}/{env_key}: give one of them, not both")
    if env_key in doc:
        env = value.text(doc[env_key], f"{prefix}{env_key}")
        token = os.environ.get(env, "").strip()
        if not token:
            raise MonitorConfigError(f"{prefix}{env_key}: environment variable {short(env, 60)} is unset or empty; export it")
        return token
    if value_key in doc:
        raw = doc[value_key]
        if not isinstance(raw, str) or not raw.strip():
            raise MonitorConfigError(f"{prefix}{value_key}: empty or not a string; give a token, or remove the key to "
                              "turn authentication off")
        return raw.strip()
    return None


def check_notify_config(path: Path, key: str = "notify_config") -> None:
    """Parse the alerting config now, before the daemon's heavy imports: a bad notify config (an alias
    bomb, a typo) then fails in a second like this file does. The engine parses it again when it starts."""
    from alerting.config import AlertingConfigError
    from alerting.config import load_config as load_alerting_config
    from alerting.correlate import load_rules

    try:
        load_rules(load_alerting_config(path).correlation_files)
    except AlertingConfigError as exc:
        raise MonitorConfigError(f"{key}: {exc}") from None



def parse_listen(raw: Any, key: str = "listen") -> tuple[str, int]:
    text = str(raw) if isinstance(raw, (str, int)) else ""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or len(port) > 5 or not 0 <= int(port) <= 65535:
        raise MonitorConfigError(f"{key}: expected host:port like 127.0.0.1:9105 (port 0-65535), got {short(raw)}")
    return host.strip("[]"), int(port)


def _jsonl_options(src: FileSourceConfig, raw: dict, key: str, base: Path) -> None:
    extra = set(raw) - _JSONL_KEYS
    if extra:
        raise MonitorConfigError(f"{key}.{sorted(extra)[0]}: unknown key; allowed: {', '.join(sorted(_JSONL_KEYS))}")
    total = raw.get("total_steps")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 1):
        raise MonitorConfigError(f"{key}.total_steps: expected the run's trainer.total_training_steps (an integer >= 1), "
                          f"got {total!r}")
    src.total_steps = total
    src.down_after = value.duration(raw.get("down_after", 600), f"{key}.down_after")
    if src.down_after <= 0:
        raise MonitorConfigError(f"{key}.down_after: must be > 0 (e.g. 10m)")
    steps = raw.get("down_after_steps", 3)
    if isinstance(steps, bool) or not isinstance(steps, int | float) or not 1 <= steps <= 1000:
        raise MonitorConfigError(f"{key}.down_after_steps: expected a number of steps in [1, 1000], got {steps!r}")
    src.down_after_steps = float(steps)
    export = raw.get("export", False)
    if not isinstance(export, bool):
        raise MonitorConfigError(f"{key}.export: expected true or false, got {export!r}")
    src.export = export
    if raw.get("resolved_config") is not None:
        src.resolved_config = str(value.path(base, raw["resolved_config"], f"{key}.resolved_config"))
    if raw.get("checkpoint_dir") is not None:
        src.checkpoint_dir = str(value.path(base, raw["checkpoint_dir"], f"{key}.checkpoint_dir"))


def load_config(path: str | Path) -> MonitorConfig:
    path = Path(path)
    try:
        doc = load_yaml_file(path)
    except OSError as exc:
        raise MonitorConfigError(f"config {path}: cannot read ({exc.strerror}); check the --config path") from exc
    except UnsafeYAML as exc:
        raise MonitorConfigError(str(exc)) from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise MonitorConfigError(f"config {path}: expected a mapping of settings at the top level")
    bad = unknown_key(doc, TOP_KEYS)
    if bad:
        raise MonitorConfigError(f"config {path}: unknown key {bad[0]!r}; {bad[1]}")
    try:
        return _parse(doc, path)
    except MonitorConfigError as exc:
        raise MonitorConfigError(f"config {path}: {exc}") from None


def _parse(doc: dict[str, Any], path: Path) -> MonitorConfig:
    base = path.parent
    cfg = MonitorConfig(path=path)
    cfg.cluster = value.text(doc.get("cluster", "default"), "cluster")
    if "listen" in doc:
        cfg.host, cfg.port = parse_listen(doc["listen"])
    cfg.bearer_token = _token(doc, "bearer_token")
    if "state_db" in doc:
        cfg.state_db = value.path(base, doc["state_db"], "state_db")
    else:
        cfg.state_db = base / "verl-monitor" / "state.db"
    if doc.get("external_url") is not None:
        cfg.external_url = value.text(doc["external_url"], "external_url")
    for key in ("grafana_url", "prometheus_url"):  # the console's links out (monitor/web/links.py)
        if doc.get(key) is not None:
            setattr(cfg, key, value.text(doc[key], key).rstrip("/"))
    cfg.eval_interval = value.duration(doc.get("eval_interval", 0.5), "eval_interval")
    cfg.rules = [value.path(base, r, f"rules[{i}]", must_exist=True) for i, r in enumerate(value.listing(doc.get("rules"), "rules"))]
    if doc.get("notify_config"):
        cfg.notify_config = value.path(base, doc["notify_config"], "notify_config", must_exist=True)
        check_notify_config(cfg.notify_config)
    cfg.reward_outliers = value.flag(doc.get("reward_outliers", True), "reward_outliers")
    if "console" in doc:
        cfg.console = value.flag(doc["console"], "console")
    names: set[str] = set()
    for i, raw in enumerate(value.listing(doc.get("targets"), "targets")):
        key = f"targets[{i}]"
        raw = _section(raw, key, "{url: http://host:port/metrics, ...}")
        if not isinstance(raw.get("url"), str):
            raise MonitorConfigError(f"{key}.url: expected {{url: http://host:port/metrics, ...}}")
        if not raw["url"].startswith(("http://", "https://")):
            raise MonitorConfigError(f"{key}.url: {short(raw['url'])!r} must start with http:// or https://")
        name = value.text(raw.get("name") or raw["url"], f"{key}.name")
        if name in names:
            raise MonitorConfigError(f"{key}.name: duplicate target name {short(name)!r}; names must be unique")
        names.add(name)
        interval = value.duration(raw.get("interval", 5), f"{key}.interval")
        timeout = value.duration(raw.get("timeout", min(interval, 3.0)), f"{key}.timeout")
        node = value.text(raw["node"], f"{key}.node") if raw.get("node") is not None else None
        cfg.targets.append(Target(name, raw["url"], node, value.text(raw.get("job", "verl"), f"{key}.job"), interval, timeout,
                                  value.size(raw.get("body_size_limit", "32MiB"), f"{key}.body_size_limit"),
                                  value.count(raw.get("sample_limit", 0), f"{key}.sample_limit"),
                                  value.count(raw.get("label_limit", 0), f"{key}.label_limit"),
                                  value.count(raw.get("label_value_length_limit", 0), f"{key}.label_value_length_limit"),
                                  value.flag(raw.get("honor_timestamps", True), f"{key}.honor_timestamps")))
        token = _token(raw, f"{key}.api_token")
        if token:
            cfg.target_tokens[name] = token
    if doc.get("prometheus"):
        p = _section(doc["prometheus"], "prometheus", "{url: http://host:9090, queries: [...]}")
        if not isinstance(p.get("url"), str) or not p["url"].startswith(("http://", "https://")):
            raise MonitorConfigError("prometheus.url: expected {url: http://host:9090, queries: [...]}")
        queries = value.listing(p.get("queries"), "prometheus.queries") or ['{__name__=~"verl_.*|DCGM_FI_.*|up"}']
        cfg.prometheus = PromAPIConfig(
            p["url"].rstrip("/"), [value.text(q, f"prometheus.queries[{i}]") for i, q in enumerate(queries)],
            value.duration(p.get("step", 15), "prometheus.step"),
            value.duration(p.get("interval", 60), "prometheus.interval"), value.duration(p.get("chunk", 3600), "prometheus.chunk"),
            value.duration(p.get("lookback", 600), "prometheus.lookback"), value.duration(p.get("timeout", 10), "prometheus.timeout"))
        if cfg.prometheus.chunk / cfg.prometheus.step > MAX_POINTS_PER_QUERY:
            raise MonitorConfigError(f"prometheus.step: {short(p.get('step'))} over a chunk of {cfg.prometheus.chunk:g}s is "
                              f"more than {MAX_POINTS_PER_QUERY} points per series; raise step or lower chunk")
    for key in ("jsonl", "dmon"):
        for i, raw in enumerate(value.listing(doc.get(key), key)):
            raw = _section(raw, f"{key}[{i}]", "{path: FILE, node: NAME}")
            if not (raw.get("path") or (key == "dmon" and raw.get("command"))):
                raise MonitorConfigError(f"{key}[{i}].path: expected {{path: FILE, node: NAME}}")
            command = [value.text(c, f"{key}[{i}].command") for c in value.listing(raw.get("command"), f"{key}[{i}].command")]
            src = FileSourceConfig(str(value.path(base, raw["path"], f"{key}[{i}].path")) if raw.get("path") else None,
                                   command or None,
                                   value.text(raw["node"], f"{key}[{i}].node") if raw.get("node") is not None else None)
            if key == "jsonl":
                _jsonl_options(src, raw, f"jsonl[{i}]", base)
            getattr(cfg, key).append(src)
    if "file_sd" in doc and "file_sd_configs" in doc:
        raise MonitorConfigError("file_sd/file_sd_configs: give one of them (the same section, Prometheus' spelling too)")
    raw_sd = doc.get("file_sd", doc.get("file_sd_configs"))
    cfg.file_sd = config_discovery.file_sd(raw_sd, base)
    cfg.ray = config_discovery.ray(doc.get("ray"))
    nv = _section(doc.get("nvml") or {}, "nvml", "{enabled: true, interval: 5s}")
    cfg.nvml = value.flag(nv.get("enabled", False), "nvml.enabled")
    cfg.nvml_interval = value.duration(nv.get("interval", 5), "nvml.interval")
    cfg.retention = value.duration(doc.get("retention", "24h"), "retention")
    if cfg.retention <= 0:
        raise MonitorConfigError("retention: must be > 0, e.g. 24h")
    cfg.replica = value.text(doc["replica"], "replica") if "replica" in doc else ""
    cfg.heartbeat = None if doc.get("heartbeat") is None else parse_heartbeat(doc["heartbeat"])
    lim = _section(doc.get("limits") or {}, "limits", "{max_series: 20000, capacity: 4096, stale_after: 5m}")
    cfg.limits = StoreLimits(value.integer(lim.get("capacity", 4096), "limits.capacity", lo=2),
                             value.integer(lim.get("max_series", 20000), "limits.max_series"),
                             value.integer(lim.get("max_series_per_metric", 2000), "limits.max_series_per_metric"),
                             value.duration(lim.get("stale_after", 300), "limits.stale_after"),
                             value.duration(lim.get("evict_after", 3600), "limits.evict_after"))
    return cfg
