"""The HA pair with both monitors SIGKILLed: MonitorDown pages through Prometheus and the Watchdog stops
arriving at the dead man's switch (the stack of tests/e2e/conftest.py; the one-message-per-outage half is
tests/e2e/test_ha_pair.py, a file of its own so the two stacks run on two workers)."""

from __future__ import annotations

import json
import time

import pytest

from harness.ha_pair import HAPair
from tests.e2e.ha_pair_steps import texts, wait_for

pytestmark = pytest.mark.slow


def test_both_monitors_killed_page_monitor_down_and_stop_the_watchdog(pair: HAPair) -> None:
    wait_for("the Watchdog at the dead man's switch", lambda: pair.deadman.received, 60, pair)
    t0 = time.time()
    pair.kill("monitor-a")
    pair.kill("monitor-b")
    wait_for("MonitorDown page", lambda: any("Monitor Down" in t for t in texts(pair)), 120, pair)
    delay = time.time() - t0
    assert delay < 120
    seen = len(pair.deadman.received)
    time.sleep(12)  # the Watchdog repeats every group_interval (5 s here) while it fires
    assert len(pair.deadman.received) <= seen + 1, "the Watchdog still arrives with both monitors dead"
    print("HA figures", json.dumps({"monitor_down_page_s": delay}))
