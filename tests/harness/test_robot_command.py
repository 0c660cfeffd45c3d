"""``verl-ops robot wecom``: the newcomer's stand-in robot is a documented command; it writes an
alerting.yaml routing to itself, and ``verl-alert test`` with that file reaches it (printed as received)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from alerting.cli import main as alert_main


@pytest.mark.parametrize("kind", ["wecom", "dingtalk"])  # dingtalk: a signed robot, its secret in the file too
def test_the_robot_command_receives_verl_alert_test(tmp_path: Path, kind: str) -> None:
    cfg = tmp_path / "alerting-standin.yaml"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "robot", kind, "--port", "0", "--write-config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    got_message = threading.Event()

    def read() -> None:
        for line in proc.stdout or []:
            lines.append(line)
            if line.startswith("--- received"):
                got_message.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        for _ in range(600):  # harness.cli's imports take seconds on a loaded machine
            if any(line.startswith("wrote ") for line in lines):
                break
            threading.Event().wait(0.1)
        assert cfg.is_file(), "".join(lines)
        assert f"--receiver ops-{kind}" in "".join(lines)
        assert alert_main(["test", "--config", str(cfg), "--receiver", f"ops-{kind}"]) == 0
        assert got_message.wait(10), "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # still importing when the signal came: the assertion above says why
            proc.kill()
            proc.wait()
    assert "Test message from verl-alert" in "".join(lines)
