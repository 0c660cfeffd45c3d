"""``verl-monitor run`` without a config file: what its flags add to ``config.default_config`` -- where
its alerts say they are (node, cluster) and which rules judge them."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

from monitor.config import MonitorConfig, _path, _text

DEMO_RULES = Path(__file__).with_name("rules") / "demo.yaml"  # `--rules demo`: the demo's short windows
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "0.0.0.0")


def host_name() -> str:
    return socket.gethostname().split(".")[0]


def label_and_rules(cfg: MonitorConfig, node: str | None = None, cluster: str | None = None,
                    rules: list[str] | None = None) -> MonitorConfig:
    """``node``: the node label of every target; without it a trainer on this machine (a loopback
    address) is labelled with this machine's host name, so an alert says where it is ("127.0.0.1" says
    nothing), and a remote one keeps its host part. ``rules``: files, or ``demo``."""
    if cluster is not None:
        cfg.cluster = _text(cluster, "--cluster")
    cfg.rules = [DEMO_RULES if r == "demo" and not Path(r).exists() else _path(Path.cwd(), r, "--rules", must_exist=True)
                 for r in rules or []]
    for i, tg in enumerate(cfg.targets):
        host = tg.url.partition("://")[2].split("/", 1)[0].rsplit(":", 1)[0]
        if node is not None:
            cfg.targets[i] = dataclasses.replace(tg, node=_text(node, "--node"))
        elif host in LOOPBACK_HOSTS and not tg.node:
            cfg.targets[i] = dataclasses.replace(tg, node=host_name() or None)
    return cfg
