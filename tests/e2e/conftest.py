"""The HA pair stack for tests/e2e/test_ha_pair*.py: one per test, started from the example configs on
free loopback ports (``harness.ha_pair``), handed over once both Alertmanager peers form one cluster
and both monitors evaluate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.ha_pair import PORTS, HAPair
from harness.ports import free_ports
from tests.e2e.ha_pair_steps import wait_for


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[HAPair]:
    with HAPair(tmp_path, free_ports(PORTS), fast=True) as p:
        wait_for("both Alertmanager peers in one cluster", lambda: all(
            len(httpx.get(f"{p.url(k)}/api/v2/status").json()["cluster"]["peers"]) == 2 for k in ("am_a", "am_b")),
            60, p)
        for k in ("monitor_a", "monitor_b"):
            wait_for(f"{k} evaluating", lambda k=k: "verl_monitor_heartbeat_timestamp_seconds{" in
                     httpx.get(f"{p.url(k)}/metrics").text, 60, p)
        yield p
