"""The demo rules profile: the production rules with short windows for the injected faults, short
correlation holds, and the config files a ``Stack`` runs on (``write_configs``). The production rules
need hours of history (drift over 1 h, leak over 30 min, 2-minute correlation holds); the demo says so
when it starts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from alerting.config import DEFAULT_RULES as DEFAULT_CORRELATION
from harness.ports import free_port
from harness.standin import RobotStandIn
from monitor.evaluation.rules import DEFAULT_RULES

# Short windows for the faults the demo injects; everything else keeps the production defaults.
# Keyed by alert and detector type: an alert may have rules of other types (KLDriftDetected's blow-up rule
# is a level shift on verl logs), whose parameters these are not.
DEMO_DETECTORS: dict[tuple[str, str], dict[str, Any]] = {
    ("MemoryLeakSuspected", "leak"): {"window": 45, "every": 5, "floor": 4, "min_buckets": 6, "persistence": 2},
    # min_change 0.1: the tiny trainer's healthy KL wanders 0.01-0.08 from step to step, and on a slow machine
    # (1 step/s) a 60 s window is 60 steps, short enough for one upward wander to pass production's 0.02 floor
    # (a CI run paged at KL 0.08, before the fault); zeroing kl_coef takes KL past 1 within 20 steps
    ("KLDriftDetected", "drift"): {"window": 60, "every": 3, "min_samples": 20, "persistence": 2, "min_change": 0.1},
    ("RolloutBufferDrop", "window_drop"): {"window": 60},
    # production: 5 min warm-up, 10 min baseline, 2 min confirmation
    ("ThroughputDrop", "level_shift"): {"warmup_s": 10, "baseline_s": 60, "confirm_s": 10},
}
DEMO_KEEP_FIRING = {"MemoryLeakSuspected": "30s", "KLDriftDetected": "30s"}


# Without a GPU the simulated leak is host memory (the trainer never invents GPU series). The demo then
# also exposes the trainer's resident set the way a process exporter would (prometheus_client's
# ProcessCollector reading /proc/<trainer pid>) and the demo profile watches it with the same leak rule.
HOST_LEAK_SELECTOR = 'process_resident_memory_bytes{job="verl-process"}'
# The host rule pages at a lower bound of 150 MB/min, half the demo's simulated leak (300 MB/min), not the GPU
# rule's 10: a process's RSS ratchets while the run warms up (the embedding model, the first data-quality passes:
# +150 MB over the first ~40 steps), which a 45 s window sees as a leak when the machine is slow -- a CI run
# paged "a leak" during the KL demo. Replayed at 0.2-3x the recorded pace (tests/fixtures/demo-trainer-rss-loaded.txt
# and a quiet run), the healthy lower bound reached 90 MB/min (10 MB/min paged 35 of 84 replays); the leak's stays
# ~290 and is paged as soon as before (50-51 s after the monitor starts).
HOST_LEAK_MIN_SLOPE = 150e6
DEMO_CORRELATION_WINDOW = "20s"


def demo_rules(host_leak: bool) -> dict[str, Any]:
    doc = yaml.safe_load(DEFAULT_RULES.read_text(encoding="utf-8"))
    extra = []
    for rule in doc["rules"]:
        name = rule["alert"]
        demo = DEMO_DETECTORS.get((name, rule["detector"]["type"]))
        if demo is not None:
            # the demo's windows are seconds on purpose: a `steps:` floor (windows of at least N samples,
            # for slow verl runs) would stretch the 60 s KL window past the demo's whole run; `per_step` needs
            # `steps:` and goes with it
            rule["detector"] = {k: v for k, v in {**rule["detector"], **demo}.items()
                                if k not in ("steps", "per_step")}
        if name in DEMO_KEEP_FIRING:
            rule["keep_firing_for"] = DEMO_KEEP_FIRING[name]
        if name == "MemoryLeakSuspected" and host_leak and "verl_jsonl" not in str(rule["select"]):
            # a deep copy: a detector dict shared by two rules would be dumped as a YAML alias, which the
            # monitor's safe rules loader refuses
            host = dict(copy.deepcopy(rule), select=HOST_LEAK_SELECTOR, plot=True)
            host["detector"]["min_slope_per_min"] = HOST_LEAK_MIN_SLOPE
            host["summary"] = ("Trainer memory on {{ labels.node }} rising {{ (details.slope_per_min / 1e6) "
                               "| round(1) }} MB/min (no GPU here: host memory stands in for GPU memory)")
            extra.append(host)
    doc["rules"].extend(extra)
    return doc


def demo_correlation(window: str) -> dict[str, Any]:
    doc = yaml.safe_load(DEFAULT_CORRELATION.read_text(encoding="utf-8"))
    for rule in doc["rules"]:
        rule["window"] = window
    return doc


def write_configs(workdir: Path, robot: RobotStandIn, kind: str, trainer_url: str, node: str,
                  cluster: str, scrape_interval: float, demo_profile: bool, process_url: str | None,
                  correlation_window: str | None = DEMO_CORRELATION_WINDOW) -> Path:
    """The alerting and monitor YAML for one run; returns the monitor config path."""
    workdir.mkdir(parents=True, exist_ok=True)
    monitor_port = free_port()  # known up front so "+N more" links in messages point at this monitor
    alerting: dict[str, Any] = {
        "monitor_url": f"http://127.0.0.1:{monitor_port}",
        "receivers": [{"name": f"demo-{kind}", "type": kind, "url": robot.url,
                       **({"secret": robot.secret} if getattr(robot, "secret", None) else {})}],
        "route": {"receiver": f"demo-{kind}", "group_by": ["alertname", "cluster", "node"],
                  "group_wait": "1s", "group_interval": "5s", "repeat_interval": "1h"},
        "outbox": {"backoff_initial": "0.5s", "backoff_max": "5s"},
    }
    if correlation_window:
        (workdir / "correlation.demo.yaml").write_text(yaml.safe_dump(demo_correlation(correlation_window),
                                                                         sort_keys=False))
        alerting["correlation"] = {"include_defaults": True, "rules_files": ["correlation.demo.yaml"]}
    if demo_profile:
        (workdir / "rules.demo.yaml").write_text(yaml.safe_dump(demo_rules(process_url is not None),
                                                                sort_keys=False))
    (workdir / "alerting.yaml").write_text(yaml.safe_dump(alerting, sort_keys=False))
    monitor: dict[str, Any] = {
        "cluster": cluster, "listen": f"127.0.0.1:{monitor_port}", "state_db": "state/state.db", "eval_interval": "1s",
        "notify_config": "alerting.yaml",
        "targets": [{"name": "trainer", "url": trainer_url, "node": node, "job": "verl",
                     "interval": f"{scrape_interval}s", "timeout": "2s"}],
    }
    if process_url:
        monitor["targets"].append({"name": "trainer-process", "url": process_url, "node": node,
                                   "job": "verl-process", "interval": f"{scrape_interval}s", "timeout": "2s"})
    if demo_profile:
        monitor["rules"] = ["rules.demo.yaml"]
    path = workdir / "monitor.yaml"
    path.write_text(yaml.safe_dump(monitor, sort_keys=False))
    return path
