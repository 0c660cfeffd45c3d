"""Real storage faults under the running daemon: its state dir on a 2 MiB tmpfs that fills up, and on
an ext4 image that turns itself read-only (an injected ext4 error, errors=remount-ro). Needs root
(mount); skipped with the reason otherwise. While writes fail the alert is visible in the API, /healthz
answers 503 naming the database and the fault, and nothing is paged; once the filesystem takes writes
again (space freed; the disk repaired and the monitor restarted) the page goes out exactly once."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import RunningDaemon, Targets, metric, wait_for

from harness.standin import WebhookStandIn

RULES = {"rules": [{"alert": "StateDiskProbe", "severity": "P1", "select": "probe_temperature",
                    "detector": {"type": "threshold", "op": ">", "value": 0.5}, "summary": "hot"}]}


class Probe:
    """A scrape target whose one gauge the test sets (on monitor_http's loopback server)."""

    def __init__(self) -> None:
        self.targets = Targets()
        self.url = f"{self.targets.url}/probe"
        self.value = 0.0

    @property
    def value(self) -> float:
        return self._value

    @value.setter
    def value(self, v: float) -> None:
        self._value = v
        self.targets.bodies["/probe"] = f"# TYPE probe_temperature gauge\nprobe_temperature {v}\n"

    def close(self) -> None:
        self.targets.close()


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=10)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    state.mkdir()
    try:
        r = _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(state))
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot run mount ({exc})")
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {r.stderr.strip()}")
    yield state
    subprocess.run(["umount", "-l", str(state)], capture_output=True, timeout=10)


def _fill(state: Path) -> Path:
    filler = state / "filler"
    with contextlib.suppress(OSError), open(filler, "wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    return filler


def _start(tmp: Path, probe: Probe, robot: WebhookStandIn) -> RunningDaemon:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(RULES))
    (tmp / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "hook", "type": "webhook", "url": robot.url, "timeout": "2s"}],
        "route": {"receiver": "hook", "group_wait": "0s", "group_interval": "1s", "group_by": ["alertname"]}}))
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.1s",
           "rules": ["rules.yaml"], "notify_config": "alerting.yaml", "cluster": "test",
           "targets": [{"name": "probe", "url": probe.url, "node": "gpu-01", "interval": "0.2s"}]}
    (tmp / "monitor.yaml").write_text(yaml.safe_dump(cfg))
    return RunningDaemon(tmp / "monitor.yaml")


def _pages(robot: WebhookStandIn) -> list[str]:
    return [a["status"] for r in robot.received for a in r.body["alerts"]]


def _degraded(d: RunningDaemon, how: str) -> None:
    """Detection goes on in memory, /healthz says why it is 503, the error is counted."""
    def firing() -> bool:
        return any(a["state"] == "firing" for a in httpx.get(f"{d.url}/api/v1/alerts").json()["data"])
    assert wait_for(firing, timeout=10)
    health = httpx.get(f"{d.url}/healthz")
    assert health.status_code == 503
    assert any(r.startswith(f"state.db: transition failed ({how}") for r in health.json()["reasons"]), health.json()
    assert (metric(d.url, "verl_monitor_storage_errors_total", db="state.db", op="transition") or 0) >= 1


@pytest.mark.slow
def test_a_full_state_filesystem_is_loud_and_pages_once_space_returns(tmp_path: Path, tmpfs: Path) -> None:
    probe, robot = Probe(), WebhookStandIn()
    d = _start(tmp_path, probe, robot)
    try:
        assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 200, timeout=10)
        filler = _fill(tmpfs)
        probe.value = 1.0
        _degraded(d, "disk_full")
        assert _pages(robot) == []  # not paged before it is written
        filler.unlink()
        assert wait_for(lambda: _pages(robot) == ["firing"], timeout=15)
        assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 200, timeout=15)
        probe.value = 0.0
        assert wait_for(lambda: _pages(robot) == ["firing", "resolved"], timeout=15)
    finally:
        d.stop()
        probe.close()
        robot.close()


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An ext4 image loop-mounted at state/ with errors=remount-ro, as a real state disk."""
    img, state = tmp_path / "state.img", tmp_path / "state"
    state.mkdir()
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    try:
        made = subprocess.run(["mkfs.ext4", "-q", str(img)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot run mkfs.ext4 ({exc})")
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    r = _mount("-o", "loop,errors=remount-ro", str(img), str(state))
    if r.returncode != 0:
        pytest.skip(f"loop mount not permitted here: {r.stderr.strip()}")
    yield img, state
    subprocess.run(["umount", "-l", str(state)], capture_output=True, timeout=10)


def _trigger_fs_error(state: Path) -> None:
    """What ext4 does on a disk error: remount itself read-only under the running monitor."""
    source = subprocess.run(["findmnt", "-no", "SOURCE", str(state)], capture_output=True, text=True).stdout.strip()
    trigger = Path("/sys/fs/ext4") / Path(source).name / "trigger_fs_error"
    if not trigger.exists():
        pytest.skip(f"{trigger} missing: this kernel cannot simulate an ext4 error")
    trigger.write_text("1")


def _fail_disk(d: RunningDaemon, state: Path, probe: Probe) -> None:
    """A healthy daemon, then its state disk turns read-only and the probe's alert condition starts."""
    assert wait_for(lambda: httpx.get(f"{d.url}/healthz").status_code == 200, timeout=10)
    _trigger_fs_error(state)
    probe.value = 1.0


@pytest.mark.slow
def test_a_state_filesystem_turned_read_only_is_loud_and_pages_after_repair(tmp_path: Path,
                                                                           ext4: tuple[Path, Path]) -> None:
    img, state = ext4
    probe, robot = Probe(), WebhookStandIn()
    d = _start(tmp_path, probe, robot)
    try:
        _fail_disk(d, state, probe)
        _degraded(d, "read_only")
        assert _pages(robot) == []
        d.stop()  # a person repairs the disk: stop, fsck, mount, start -- no state to edit by hand
        assert subprocess.run(["umount", str(state)], capture_output=True, timeout=10).returncode == 0
        subprocess.run(["e2fsck", "-fy", str(img)], capture_output=True, timeout=60)
        assert _mount("-o", "loop,errors=remount-ro", str(img), str(state)).returncode == 0
        d = _start(tmp_path, probe, robot)
        assert wait_for(lambda: _pages(robot) == ["firing"], timeout=15)
        assert httpx.get(f"{d.url}/healthz").status_code == 200
    finally:
        d.stop()
        probe.close()
        robot.close()
