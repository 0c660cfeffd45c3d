"""``verl-monitor run`` without a config file: the targets its flags name (``default_config``), where
its alerts say they are (node, cluster) and which rules judge them."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

from monitor import config_values as value
from monitor.config import (
    DEFAULT_TARGET,
    MonitorConfig,
    MonitorConfigError,
    check_notify_config,
    parse_listen,
)
from monitor.sources.prom_text import Target

DEMO_RULES = Path(__file__).with_name("rules") / "demo.yaml"  # `--rules demo`: the demo's short windows
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0")


def target_from_url(raw: str, key: str = "--target") -> Target:
    """A scrape target from a URL; ``host:port`` alone means ``http://host:port/metrics``."""
    url = raw if "://" in raw else f"http://{raw}"
    if not url.startswith(("http://", "https://")):
        raise MonitorConfigError(f"{key}: {raw!r} must start with http:// or https:// (or be host:port)")
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    if not host:
        raise MonitorConfigError(f"{key}: {raw!r} has no host; pass e.g. 127.0.0.1:8000")
    if not path:
        url = f"{scheme}://{host}/metrics"
    return Target(url, url)


def default_config(targets: list[str] | None = None, notify_config: str | None = None,
                   listen: str | None = None) -> MonitorConfig:
    """Config without a file: scrape ``targets`` (default the local trainer) with the default rules.
    State goes to ./verl-monitor/state.db."""
    cfg = MonitorConfig(path=Path.cwd(), state_db=Path("verl-monitor") / "state.db", from_file=False)
    names: set[str] = set()
    for raw in targets or [DEFAULT_TARGET]:
        tg = target_from_url(raw)
        if tg.name in names:
            raise MonitorConfigError(f"--target {raw}: given twice")
        names.add(tg.name)
        cfg.targets.append(tg)
    if notify_config is not None:
        cfg.notify_config = value.path(Path.cwd(), notify_config, "--notify-config", must_exist=True)
        check_notify_config(cfg.notify_config, "--notify-config")
    if listen is not None:
        cfg.host, cfg.port = parse_listen(listen, "--listen")
    return cfg


def host_name() -> str:
    return socket.gethostname().split(".")[0]


def label_and_rules(cfg: MonitorConfig, node: str | None = None, cluster: str | None = None,
                    rules: list[str] | None = None) -> MonitorConfig:
    """``node``: the node label of every target; without it a trainer on this machine (a loopback
    address) is labelled with this machine's host name, so an alert says where it is ("127.0.0.1" says
    nothing), and a remote one keeps its host part. ``rules``: files, or ``demo``."""
    if cluster is not None:
        cfg.cluster = value.text(cluster, "--cluster")
    cfg.rules = [DEMO_RULES if r == "demo" and not Path(r).exists() else value.path(Path.cwd(), r, "--rules", must_exist=True)
                 for r in rules or []]
    for i, tg in enumerate(cfg.targets):
        host = tg.url.partition("://")[2].split("/", 1)[0].rsplit(":", 1)[0]
        if node is not None:
            cfg.targets[i] = dataclasses.replace(tg, node=value.text(node, "--node"))
        elif host in LOOPBACK_HOSTS and not tg.node:
            cfg.targets[i] = dataclasses.replace(tg, node=host_name() or None)
    return cfg
