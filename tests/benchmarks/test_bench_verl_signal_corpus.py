"""The training-signal corpus benchmark (benchmarks/verl_signal_corpus.py) on its committed sample of runs
written by verl 0.9.1's own code, and its arithmetic."""

from __future__ import annotations

import json

import pytest

from benchmarks.verl_signal_corpus import SAMPLE, main, summarise


def test_sample_healthy_run_is_quiet_and_the_collapse_is_paged(capsys: pytest.CaptureFixture[str]) -> None:
    """A healthy RLOO run at 36-s steps (no page), and responses collapsing
    x8 over 60 steps on PPO at 20-s steps: ResponseLengthCollapse, held to the end."""
    assert main(["--data", str(SAMPLE), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    runs = {r["run"]: r for r in lines if "run" in r}
    summary = lines[-1]
    assert runs["healthy-018-rloo-36s"]["false_pages"] == [], runs["healthy-018-rloo-36s"]
    fault = runs["length_collapse-x8-ramp60-ppo-20s"]
    assert fault["paged_by"] == "ResponseLengthCollapse" and fault["in_deadline"] and fault["ok"], fault
    assert summary["false_pages"] == 0 and summary["families"]["length_collapse"]["detected_above"] == 1.0


def test_summary_counts_pages_per_run_day_and_detection_above_the_boundary() -> None:
    healthy = {"fault": "healthy", "run_days": 0.5, "false_pages": [], "unusual_p3": 0, "run": "h"}
    paged = {**healthy, "run": "h2", "false_pages": ["TrainingStalled"]}
    hit = {"fault": "mismatch", "run": "m1", "above_boundary": True, "in_deadline": True, "delay_steps": 4,
           "uncovered_after": [], "repaged": [], "false_pages": []}
    miss = {**hit, "run": "m2", "in_deadline": False, "delay_steps": None}
    below = {**hit, "run": "m3", "above_boundary": False, "in_deadline": False}
    s = summarise([healthy, paged, hit, miss, below])
    assert s["false_pages_per_100_run_days"] == 100.0 and s["false_pages_by_alert"] == {"TrainingStalled": 1}
    fam = s["families"]["mismatch"]
    assert fam["detected_above"] == 0.5 and fam["missed_above"] == ["m2"] and fam["median_delay_steps"] == 4
    assert fam["runs_below"] == 1 and fam["detected_below"] == 0.0
