"""Runs written by verl 0.9.1's own code (benchmarks/data/verl_real), replayed live with the default rules:
the cases of issue 22 that the old windows got wrong, each scored as benchmarks/verl_runs_real.py does."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.verl_runs_real import DATA, score, simulate
from monitor.evaluation.rules import load_rule_files


def _run(name: str, tmp_path: Path, restart: bool) -> dict:
    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    lines = gzip.decompress((DATA / f"{name}.jsonl.gz").read_bytes()).splitlines(keepends=True)
    restart_at = max(2, (truth["onset_step"] or 100) - 2) if restart else None
    return score(truth, simulate(lines, truth["times"], truth["step_s"], load_rule_files(None), tmp_path, restart_at))


@pytest.mark.parametrize(("name", "restart"), [
    ("ppo-healthy-10s", False),    # KL warm-up 0 -> plateau: was KLDriftDetected
    ("grpo-kl_off-180s", False),   # slow drift at 3-min steps: was never paged
    ("ppo-collapse-10s", True),    # collapse 3.3 min after the start, monitor restarted 2 steps before
    ("grpo-collapse-720s", False),  # 12-min steps: baseline sized in seconds held 1 record
    ("ppo-leak-10s", False),       # leak rate: was ~half the truth
])
def test_real_verl_run_comes_out_right(name: str, restart: bool, tmp_path: Path) -> None:
    r = _run(name, tmp_path, restart)
    assert r["ok"], r
