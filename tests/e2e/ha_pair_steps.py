"""The HA pair's test steps (``tests/e2e/test_ha_pair*.py``): waiting with the stack's logs
on a timeout, what the robot got, and one outage with its page and resolve. The stack itself is the
``pair`` fixture of tests/e2e/conftest.py, one per test."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

from harness.ha_pair import FAST_GROUP_INTERVAL_S, PEER_TIMEOUT_S, HAPair
from tests.live_poll import poll

# past the peers' position wait and a group_interval (2 s and 8 s, harness/ha_pair.py FAST): a duplicate shows
# by then, even from a peer whose timer for the group runs out of phase with the other's
HOLD_S = 11.0
GAP_S = 11.0  # after a resolve, as long: a late or repeated message of the outage would arrive in it
# Alertmanager 0.25 drops an emptied aggregation group only at its 30-s cleanup, and the peer at position 1
# empties its group a peer timeout after the other (a group_interval later when a late resolve re-filled
# it). An outage of the same alert that re-opens the group before both dropped it finds it on one peer
# only, whose timer then runs out of phase with the other's new one: there Alertmanager is at-least-once
# (upstream issue 4008; README "Running two monitors"), and this test's fixed cadence hit that race often.
# With both peers up, the next outage starts after both dropped the group.
REOPEN_S = 30.0 + FAST_GROUP_INTERVAL_S + PEER_TIMEOUT_S[True] + 1.0
FIRING, RESOLVED = "P1: Reward Model Circuit Open", "RESOLVED P1: Reward Model Circuit Open"


def wait_for(what: str, check: Callable[[], Any], timeout: float, pair: HAPair) -> Any:
    got = poll(check, timeout)
    if got:
        return got
    pytest.fail(f"timed out waiting for {what}\n{report(pair)}")


def expect(pair: HAPair, pages: int, resolves: int, messages: int | None = None) -> None:
    """The robot got ``pages`` pages and ``resolves`` resolves (and ``messages`` in all), else a failure
    that carries what each peer and monitor held and did: a doubled page explains itself."""
    got = (count(pair, FIRING), count(pair, RESOLVED))
    if got != (pages, resolves) or (messages is not None and len(pair.robot.received) != messages):
        pytest.fail(f"expected {pages} pages and {resolves} resolves, got {got}\n{report(pair)}")


# the lines of an Alertmanager peer's debug log that say what it received, flushed, sent or deduplicated,
# and how its cluster saw the other peer (not memberlist's routine syncs every 2 s, nor the Watchdog's
# flush and send every 5 s)
AM_LINES = re.compile(r"Received alert|flushing|Notify success|Notify for alerts failed|Notify attempt failed|"
                      r"DedupStage|nflog|[Ss]uspect|[Mm]arking|peer|[Ss]ettl|level=(warn|error)")
AM_NOISE = re.compile(r"push/pull sync|Stream connection|Watchdog|receiver=deadmans-switch")


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def report(pair: HAPair) -> str:
    """The robot's messages with their arrival times, each peer's and monitor's state, and the logs."""
    t0 = pair.started_at
    seen = sorted([(r.at, f"robot got: {r.text.splitlines()[0]}") for r in pair.robot.received] + pair.events)
    got = "\n".join(f"  +{at - t0:7.2f}s {utc(at)} {what}" for at, what in seen)
    logs = []
    for name in pair.procs:
        text = (pair.workdir / f"{name}.log").read_text(errors="replace")
        if name.startswith("alertmanager"):
            text = "\n".join(ln for ln in text.splitlines() if AM_LINES.search(ln) and not AM_NOISE.search(ln))
            logs.append(f"--- {name} (dispatch, notify, nflog and cluster lines)\n{text[-8000:]}")
        else:
            logs.append(f"--- {name}\n{text[-2500:]}")
    return (f"timeline (seconds after the stack started; UTC as in the peers' logs):\n{got}\n{state(pair)}\n"
            + "\n".join(logs))


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
    """Inject the fault (with both peers up, ``REOPEN_S`` after the last message); once the n-th page is
    out, SIGKILL ``kill``; hold the fault past the rule's `for` (a page and a kill well inside one outage),
    clear it: the n-th resolve arrives."""
    assert pair.gauges is not None
    if pair.robot.received and all(pair.procs[f"alertmanager-{p}"].poll() is None for p in "ab"):
        time.sleep(max(0.0, pair.robot.received[-1].at + REOPEN_S - time.time()))
    t0 = time.time()
    pair.events.append((t0, f"fault {n} injected"))
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
    pair.events.append((t1, f"fault {n} cleared"))
    wait_for(f"resolve {n}", lambda: count(pair, RESOLVED) >= n, 90, pair)
    resolved = time.time() - t1
    wait_for("every live monitor resolved", lambda: not any(
        "RewardModelCircuitOpen" in httpx.get(f"{pair.url(k)}/api/v1/alerts", timeout=5).text
        for k in ("monitor_a", "monitor_b") if pair.procs[k.replace("_", "-")].poll() is None), 30, pair)
    time.sleep(GAP_S)
    expect(pair, n, n)
    return {"page_s": round(paged, 1), "resolve_s": round(resolved, 1)}
