"""Issue 36: the state disk turns read-only under the running daemon (an injected ext4 error,
errors=remount-ro) and is repaired in place -- unmounted, fsck'd, mounted again -- without stopping the
monitor: it lets go of the disk (a plain ``umount`` used to fail "target is busy", so the repair needed a
restart, which lost the RESOLVED held in memory), and the page held while writes failed goes out, and so
does that RESOLVED. Needs root (mount, mkfs.ext4); skipped with the reason otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from harness.standin import WebhookStandIn
from tests.monitor.monitor_http import wait_for
from tests.monitor.test_storage_faults_e2e import Probe, _fail_disk, _mount, _pages, _start, ext4

__all__ = ["ext4"]  # the fixture, used by name


def _alerts(d: object) -> list[dict]:
    return httpx.get(f"{d.url}/api/v1/alerts", timeout=3).json()["data"]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_state_disk_repaired_in_place_pages_firing_and_resolved_without_restart(
        tmp_path: Path, ext4: tuple[Path, Path]) -> None:
    img, state = ext4
    probe, robot = Probe(), WebhookStandIn()
    d = _start(tmp_path, probe, robot)
    try:
        _fail_disk(d, state, probe)
        assert wait_for(lambda: any(a["state"] == "firing" for a in _alerts(d)), timeout=10)
        assert httpx.get(f"{d.url}/healthz").status_code == 503
        probe.value = 0.0  # resolved while the disk still refuses: held in memory
        assert wait_for(lambda: not any(a["state"] == "firing" for a in _alerts(d)), timeout=10)
        assert _pages(robot) == []
        # the repair, with the monitor running: nothing restarted, no state edited by hand
        assert wait_for(lambda: sum("held in memory and the disk released" in e
                                    for e in httpx.get(f"{d.url}/healthz").json()["storage_events"]) == 2)
        umount = subprocess.run(["umount", str(state)], capture_output=True, text=True, timeout=10)
        assert umount.returncode == 0, umount.stderr  # the monitor holds no file on the broken disk
        subprocess.run(["e2fsck", "-fy", str(img)], capture_output=True, timeout=60)
        assert _mount("-o", "loop,errors=remount-ro", str(img), str(state)).returncode == 0
        assert wait_for(lambda: _pages(robot) == ["firing", "resolved"], timeout=60), _pages(robot)
        assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 200, timeout=30), \
            httpx.get(f"{d.url}/healthz").json()
    finally:
        d.stop()
        probe.close()
        robot.close()


def test_a_read_only_state_dir_is_released_held_in_memory_and_written_back_once_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same without root: the directory refuses new files (patched probe) while writes fail."""
    from alerting import durable
    from alerting.clock import SimulatedClock
    from harness.crashpoint import T0
    from tests.monitor.test_storage_faults import READ_ONLY, Monitor

    robot = WebhookStandIn()
    mon = Monitor(tmp_path / "state", robot, SimulatedClock(T0))
    try:
        book, engine = mon.inject()
        book.error = engine.error = READ_ONLY
        monkeypatch.setattr(durable, "_writable", lambda directory: False)
        mon.step(hot=True, n=3)
        mon.step(hot=False, n=2)  # fired and resolved while the disk refuses
        assert isinstance(mon.pipe.book._db, durable.HeldInMemory) and isinstance(mon.engine.conn, durable.HeldInMemory)
        assert mon.pages() == [] and mon.pipe.book.unwritten() == 2
        monkeypatch.setattr(durable, "_writable", lambda directory: True)  # repaired
        mon.step(hot=False, n=12)
        assert mon.pages() == ["firing", "resolved"]
        assert mon.health.reasons() == [] and not isinstance(mon.pipe.book._db, durable.HeldInMemory)
        assert any("back on disk" in e for e in mon.health.events())
    finally:
        mon.close()
        robot.close()
