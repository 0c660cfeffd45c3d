"""The monitor's side of an HA pair (README "Running two monitors"): watching the peer, and starting a
restarted replica afresh.

Why afresh: in a pair, Alertmanager holds the alerts both replicas post, and the live replica keeps them
current. A replica that comes back with its old state re-posts what it last knew -- queued posts and
alerts restored as firing -- after its peer may have resolved them: Alertmanager fires them again, a
second page for one outage. So a replica sets its previous state aside (kept as ``*.previous``, nothing
deleted) and learns the present from its sources, as a new Prometheus replica does; silences belong in
Alertmanager, whose peers gossip them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from monitor.errors import MonitorConfigError
from monitor.sources.prom_text import Target

log = logging.getLogger("monitor.daemon")
PEER_JOB = "verl-monitor-peer"
HA_RULES = Path(__file__).parent / "rules" / "ha-pair.yaml"


def add_peer(targets: list[Target], rules: list[Path], url: str) -> list[Path]:
    """Watch the other monitor of an HA pair: its /metrics as a target (job ``verl-monitor-peer``, which
    no training rule selects); returns the rule files with the HA rules (MonitorPeerDown) added."""
    from monitor.evaluation.rules import DEFAULT_RULES

    name = f"peer:{url}"
    if any(t.name == name for t in targets):
        raise MonitorConfigError(f"--peer {url}: given twice")
    targets.append(Target(name, url, None, PEER_JOB, 5.0, 3.0))
    return rules if HA_RULES in rules else [*(rules or [DEFAULT_RULES]), HA_RULES]


def set_aside_state(state_db: Path) -> list[Path]:
    """Rename the replica's state files (the alert book, the alerting engine's database with its outbox,
    their WAL files, the silence snapshot) to ``<name>.previous``; returns the files moved."""
    moved = []
    for name in (state_db.name, "alerting.db", "silences.json"):
        for suffix in ("", "-wal", "-shm"):
            path = state_db.with_name(name + suffix)
            if path.exists():
                path.replace(path.with_name(path.name + ".previous"))
                moved.append(path)
    if moved:
        log.info("replica restart: previous state set aside as %s.previous (the peer and Alertmanager hold "
                 "the present)", state_db)
    return moved
