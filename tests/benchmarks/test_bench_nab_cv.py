"""benchmarks/nab_cv.py: its vectorised scoring is the streaming detector's, and CV never peeks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from bench_datasets import NAB, needs

from benchmarks import nab, nab_cv
from benchmarks._nab_scoring import load_profiles, load_windows, prepare, read_series, score_file, score_rows
from monitor.detectors.context import ContextAnomalyDetector

ROOT = Path(__file__).resolve().parents[2]
DATA = NAB
needs_data = needs(NAB, "NAB")
FILE = "realAWSCloudwatch/ec2_cpu_utilization_5f5533.csv"


@needs_data
@pytest.mark.parametrize("short,hold,threshold", [(20, 150, 3.75), (10, 100, 2.5)])
def test_vectorised_detections_equal_the_streaming_detector(short: int, hold: int, threshold: float) -> None:
    stamps, values = read_series(DATA / FILE)
    times = [nab.epoch(s) for s in stamps]
    p = nab_cv.feature_p_values(times, values)
    rows = nab_cv.detections(nab_cv.likelihood_tail(p, (0, 1, 2), short, 10.0), threshold, hold)
    det = ContextAnomalyDetector(threshold=threshold, short=short, hold_samples=hold,
                                 history=nab_cv.HISTORY, min_history=nab_cv.MIN_HISTORY)
    was, stream = False, []
    for i, (t, v) in enumerate(zip(times, values, strict=True)):
        active = det.update(t, v).active
        if active and not was:
            stream.append(i)
        was = active
    assert rows == stream and rows


@needs_data
def test_fast_scorer_equals_the_reference_scorer() -> None:
    stamps, _ = read_series(DATA / FILE)
    windows = load_windows(DATA)[FILE]
    prep = prepare(stamps, windows)
    rng = np.random.default_rng(0)
    rows = sorted(rng.choice(len(stamps), 12, replace=False).tolist())
    flags = [False] * len(stamps)
    for r in rows:
        flags[r] = True
    for cost in load_profiles(DATA).values():
        assert score_rows(prep, rows, cost) == pytest.approx(score_file(stamps, flags, windows, cost).score)


def test_thresholds_are_chosen_on_the_training_files_only() -> None:
    """Scores on the held-out files cannot change the choice made on the training files."""
    class Prep:
        windows = 1

    files = [nab_cv.CachedFile(f"A/{i}", Prep(), np.zeros((1, 3))) for i in range(2)]
    files += [nab_cv.CachedFile(f"B/{i}", Prep(), np.zeros((1, 3))) for i in range(2)]
    n = len(nab_cv.THRESHOLDS)
    table = np.zeros((n, 4))
    table[2:7, :2] = 5.0    # A's plateau: indices 2..6
    table[n - 1, 2:] = 99.0  # B would love the last threshold
    mask = np.array([True, True, False, False])

    class Cost:
        tp, fp, fn = 1.0, 0.11, 1.0

    key, thr = nab_cv.choose({("k",): {"standard": table}}, files, mask, {"standard": Cost()})
    assert thr["standard"] == nab_cv.THRESHOLDS[4]  # the plateau's middle; B's peak is ignored


def test_users_default_rule_runs_the_detector_nab_scores() -> None:
    """UnusualTrainingMetric = NAB's reward_low_FP profile: same type, same parameters."""
    from benchmarks._common import load_profile
    from monitor.evaluation.rules import load_rule_files

    nab_rule = nab.profile_rules(load_profile(nab.DEFAULT_RULES))["reward_low_FP"].conditions[0]
    for r in (r for r in load_rule_files(None) if r.alert == "UnusualTrainingMetric"):
        c = r.conditions[0]
        assert (c.detector_type, c.params, c.spike_filter) == (nab_rule.detector_type, nab_rule.params, 0)
