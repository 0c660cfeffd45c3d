"""``verl-ops`` (harness/cli.py): the soak's bad input is one line and exit 2, before the stack starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main


def test_soak_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["soak", "--duration", "0", "--output", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--duration" in err
    assert main(["soak", "--duration", "5", "--output", str(tmp_path / "missing" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_monitor_no_longer_ships_the_soak(capsys: pytest.CaptureFixture[str]) -> None:
    from monitor.cli import main as monitor_main

    with pytest.raises(SystemExit) as info:
        monitor_main(["soak", "--duration", "1", "--output", "r.json"])
    assert info.value.code == 2
