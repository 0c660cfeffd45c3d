"""benchmarks/scenarios.py: a fault scenario through the replay pipeline, and the CLI's bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import scenarios

ROOT = Path(__file__).resolve().parents[2]


def by_name(name: str) -> scenarios.Scenario:
    return next(s for s in scenarios.scenarios() if s.name == name)


def test_halved_throughput_is_detected_in_time_without_false_alarms() -> None:
    out = scenarios.run_one(by_name("throughput_halved_15s"), seed=0)
    assert out.detected is True
    assert out.delay_s is not None and 0 <= out.delay_s <= out.deadline_s
    assert out.false_alarms == []


def test_reward_std_needs_its_five_minutes() -> None:
    out = scenarios.run_one(by_name("reward_std_6min"), seed=1)
    assert out.detected is True and 300 <= (out.delay_s or 0) <= 420  # for: 5m, counted from emission


def test_worst_delay_reports_a_miss_as_none() -> None:
    hit = scenarios.Outcome("s", 0, True, 30.0, 60.0)
    miss = scenarios.Outcome("s", 1, False, None, 60.0)
    assert scenarios.worst_delay([hit]) == 30.0
    assert scenarios.worst_delay([hit, miss]) is None


def test_unknown_scenario_is_one_line_exit_2() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scenarios.py"), "--only", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--only nope" in proc.stderr


def test_an_anomaly_alert_after_the_fault_is_a_detection_but_before_it_or_in_a_clean_run_a_false_alarm() -> None:
    fault, clean = by_name("throughput_halved_15s"), by_name("clean_3days")
    onset = scenarios.T0 + fault.onset_h * scenarios.HOUR
    firing = [("UnusualTrainingMetric", onset + 60), ("ThroughputDrop", onset + 75),
              ("UnusualTrainingMetric", onset - 3600), ("KLDriftDetected", onset + 10)]
    assert scenarios.false_alarms(fault, firing) == ["UnusualTrainingMetric@1.00h", "KLDriftDetected@2.00h"]
    assert len(scenarios.false_alarms(clean, firing)) == 4


def test_clean_run_carries_the_training_signals_the_anomaly_rules_watch() -> None:
    import numpy as np

    names = {c[0] for c in by_name("clean_3days").build(np.random.default_rng(0))}
    assert {"verl_entropy", "verl_grad_norm", "verl_clip_fraction", "verl_critic_loss",
            "verl_actor_tokens_per_second"} <= names
