"""benchmarks/evidence_rows.py: on the load's real store, a refresh written as a delta is folded by the follower
into exactly the whole row's windows, and is smaller than it; bad arguments are one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.evidence_rows import run

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "evidence_rows.py"


def test_deltas_fold_into_the_whole_rows_windows_and_cost_less() -> None:
    out = run(2, 2, 0.2, 3)  # 12 min of history: every evidence window has chunks sealed
    assert out["same"] is True and out["windows"] > 20
    assert out["delta"]["first_row_bytes"] == out["whole"]["first_row_bytes"]  # the first row is whole
    assert out["delta"]["bytes"] * 10 < out["whole"]["bytes"]


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["--refreshes", "0"], ["--hours", "nan"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.strip().count("\n") == 0, args
