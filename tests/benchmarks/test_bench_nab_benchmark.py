"""benchmarks/nab.py on a few files: the profile loads as monitor rules, detection is causal, scores beat null."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_datasets import NAB, needs

from benchmarks import nab
from benchmarks._common import load_profile
from benchmarks._nab_scoring import load_profiles, normalised, read_series

ROOT = Path(__file__).resolve().parents[2]
DATA = NAB
needs_data = needs(NAB, "NAB")
FILES = ["realKnownCause/ec2_request_latency_system_failure.csv", "realAWSCloudwatch/elb_request_count_8c0756.csv"]


def test_profile_is_a_monitor_rules_file_with_one_rule_per_profile() -> None:
    rules = nab.profile_rules(load_profile(nab.DEFAULT_RULES))
    assert set(rules) == {"standard", "reward_low_FP", "reward_low_FN"}
    assert all(r.conditions[0].detector_type == "context_anomaly" for r in rules.values())


@needs_data
def test_detections_are_causal() -> None:
    rule = nab.profile_rules(load_profile(nab.DEFAULT_RULES))["standard"]
    stamps, values = read_series(DATA / FILES[0])
    times = [nab.epoch(s) for s in stamps]
    full = nab.detect(rule, times, values)
    prefix = nab.detect(rule, times[:2500], values[:2500])
    assert prefix == full[:2500]  # the future never changes a past decision
    assert 0 < sum(full) < 20


@needs_data
def test_subset_scores_beat_the_null_detector() -> None:
    rules = nab.profile_rules(load_profile(nab.DEFAULT_RULES))
    results = nab.run(DATA, rules, FILES)
    costs = load_profiles(DATA)
    for profile, rows in results.items():
        assert normalised([s for _, s in rows], costs[profile]) > 50.0, profile


def test_missing_data_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nab.py"), "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--data" in proc.stderr and "Traceback" not in proc.stderr


@needs_data
def test_cli_last_line_is_the_summary_json() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nab.py"), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(last) == {"standard", "reward_low_FP", "reward_low_FN"}


@needs_data
def test_pipeline_and_bare_detectors_agree_on_an_ordered_file() -> None:
    rules = nab.profile_rules(load_profile(nab.DEFAULT_RULES))
    stamps, values = read_series(DATA / FILES[1])
    times = [nab.epoch(s) for s in stamps]
    via_pipeline = nab.detect_in_pipeline(rules, times, values)
    for profile, rule in rules.items():
        assert via_pipeline[profile] == nab.detect(rule, times, values), profile
    assert any(via_pipeline["standard"])


@needs_data
def test_sweep_sets_each_detectors_own_threshold_knob() -> None:
    ours = nab.profile_rules(load_profile(nab.DEFAULT_RULES))
    old = nab.profile_rules(load_profile(nab.ROOT / "monitor" / "rules" / "nab_rare_value.yaml"))
    assert nab.SWEPT.get(ours["standard"].conditions[0].detector_type, "threshold") == "threshold"
    strict = nab.run(DATA, ours, FILES[:1], threshold=50.0)  # a tail nothing reaches: no detections
    assert all(s.tp + s.fp == 0 for rows in strict.values() for _, s in rows)
    assert nab.run(DATA, old, FILES[:1], alpha=0.001)["standard"]
