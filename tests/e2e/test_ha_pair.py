"""The HA pair against the real peers (README "Running two monitors"): two ``verl-monitor`` processes,
two Debian Alertmanager peers in one gossip cluster, two ``verl-alert serve`` endpoints, Debian's
Prometheus with the shipped health rules, the stand-in robots -- all started by ``harness.ha_pair`` from
the example configs on free loopback ports, with the documented intervals shortened.

One fault is one message and its resolve one more, while a monitor or an Alertmanager peer is SIGKILLed
in the middle of the outage (with both monitors dead, MonitorDown pages and the Watchdog stops:
test_ha_pair_both_down.py, a file of its own so the two stacks run on two workers)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from harness.ha_pair import HAPair
from tests.e2e.ha_pair_steps import expect, fault, wait_for

# ~200 s, most of it the waits between outages that let both peers drop a resolved group (see the steps)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_one_message_per_outage_and_its_resolve_while_a_monitor_or_a_peer_dies(pair: HAPair) -> None:
    figures = {"monitor_a_killed": fault(pair, 1, kill="monitor-a")}
    # a restarted replica whose state still says "firing" must not page the resolved outage again
    pair.start_monitor("a")
    wait_for("monitor a back", lambda: httpx.get(f"{pair.url('monitor_a')}/metrics").status_code == 200, 60, pair)
    time.sleep(14)  # more than a re-post interval (5 s here) and the peers' group_interval (8 s)
    expect(pair, 1, 1)
    figures["next_fault"] = fault(pair, 2)
    figures["alertmanager_a_killed"] = fault(pair, 3, kill="alertmanager-a")
    figures["after_peer_killed"] = fault(pair, 4)  # which waited a duplicate's time after the last resolve
    expect(pair, 4, 4, messages=8)
    assert "Console: http://127.0.0.1:" in pair.robot.received[0].text  # our rendering survived the path
    print("HA figures", json.dumps(figures))
