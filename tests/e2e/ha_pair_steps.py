"""The HA pair's test steps (``tests/e2e/test_ha_pair*.py``): free ports, waiting with the stack's logs
on a timeout, what the robot got, and one outage with its page and resolve. The stack itself is the
``pair`` fixture of tests/e2e/conftest.py, one per test."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from harness.ha_pair import PORTS, HAPair
from tests.live_poll import poll

HOLD_S = 8.0  # past the peers' position wait (3 s) and a group_interval (5 s): a duplicate shows by then
GAP_S = 6.0  # between outages: a late or repeated message of the last one would arrive in it
FIRING, RESOLVED = "P1: Reward Model Circuit Open", "RESOLVED P1: Reward Model Circuit Open"


def free_ports() -> dict[str, int]:
    socks = []
    for _ in PORTS:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = {k: s.getsockname()[1] for k, s in zip(PORTS, socks, strict=True)}
    for s in socks:
        s.close()
    return ports


def wait_for(what: str, check: Callable[[], Any], timeout: float, pair: HAPair) -> Any:
    got = poll(check, timeout)
    if got:
        return got
    logs = "\n".join(f"--- {n}\n{(pair.workdir / f'{n}.log').read_text(errors='replace')[-1500:]}"
                     for n in pair.procs)
    pytest.fail(f"timed out waiting for {what}\nrobot got: {texts(pair)}\n{state(pair)}\n{logs}")


def state(pair: HAPair) -> str:
    """What each peer and monitor holds, for a failure message."""
    out = []
    for key, path in (("am_a", "/api/v2/alerts"), ("am_b", "/api/v2/alerts"), ("monitor_a", "/api/v1/alerts"),
                      ("monitor_b", "/api/v1/alerts"), ("monitor_a", "/metrics"), ("monitor_b", "/metrics")):
        try:
            text = httpx.get(pair.url(key) + path, timeout=5).text
        except httpx.HTTPError as exc:
            text = type(exc).__name__
        if path == "/metrics":
            text = "\n".join(ln for ln in text.splitlines() if ln.startswith(("verl_alerting_notif", "verl_alerting_outbox")))
        out.append(f"=== {key}{path}: {text[:1500]}")
    return "\n".join(out)


def texts(pair: HAPair) -> list[str]:
    return [r.text.splitlines()[0] for r in pair.robot.received]


def count(pair: HAPair, title: str) -> int:
    return sum(t.endswith(title) and (title.startswith("RESOLVED") or "RESOLVED" not in t) for t in texts(pair))


def fault(pair: HAPair, n: int, kill: str | None = None) -> dict[str, float]:
    """Inject the fault; once the n-th page is out, SIGKILL ``kill``; hold the fault past the rule's `for`
    (a page and a kill well inside one outage), clear it: the n-th resolve arrives."""
    assert pair.gauges is not None
    t0 = time.time()
    pair.gauges.circuit_state = 2
    wait_for(f"page {n}", lambda: count(pair, FIRING) >= n, 90, pair)
    paged = time.time() - t0
    if kill:
        # mid-outage, not mid-send: a peer killed within its gossip interval (100 ms here, 200 ms by default)
        # of a send has not told the other one yet, which then sends again -- Alertmanager's documented
        # at-least-once, not a duplicate this topology adds
        time.sleep(2)
        pair.kill(kill)
    time.sleep(HOLD_S)
    pair.gauges.circuit_state = 0
    t1 = time.time()
    wait_for(f"resolve {n}", lambda: count(pair, RESOLVED) >= n, 90, pair)
    resolved = time.time() - t1
    wait_for("every live monitor resolved", lambda: not any(
        "RewardModelCircuitOpen" in httpx.get(f"{pair.url(k)}/api/v1/alerts", timeout=5).text
        for k in ("monitor_a", "monitor_b") if pair.procs[k.replace("_", "-")].poll() is None), 30, pair)
    time.sleep(GAP_S)
    assert (count(pair, FIRING), count(pair, RESOLVED)) == (n, n), texts(pair)
    return {"page_s": round(paged, 1), "resolve_s": round(resolved, 1)}
