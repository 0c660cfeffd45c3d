"""The NAB scorer reproduces Numenta's published per-file scores from the raw HTM output."""

from __future__ import annotations

import csv

import pytest
from bench_datasets import NAB, needs

from benchmarks._nab_scoring import (
    PROFILE_KEYS,
    CostMatrix,
    load_profiles,
    load_windows,
    nab_files,
    normalised,
    probation_rows,
    scaled_sigmoid,
    score_file,
)

DATA = NAB
needs_data = needs(NAB / "published_results" / "numenta_raw", "NAB (with the raw HTM output)")

STANDARD = CostMatrix(tp=1.0, fp=0.11, fn=1.0)


def test_probation_and_sigmoid_follow_the_definition() -> None:
    assert probation_rows(4032) == 604
    assert probation_rows(22695) == 750
    assert scaled_sigmoid(0.0) == pytest.approx(0.0)
    assert scaled_sigmoid(-1.0) == pytest.approx(0.98661, abs=1e-5)
    assert scaled_sigmoid(3.5) == -1.0


def test_hand_worked_file() -> None:
    # 100 rows -> 15 probation rows; one window rows 40..49 (width 10).
    ts = [f"2020-01-01 00:{i // 60:02d}:{i % 60:02d}" for i in range(100)]
    window = [(ts[40], ts[49])]
    det = [False] * 100
    det[5] = True  # probation: ignored
    det[30] = True  # before any window: -fpWeight
    det[40] = True  # window's first row: the full tpWeight
    det[45] = True  # second detection in the same window: nothing
    det[54] = True  # 5 rows past the window's end, position 5/9
    s = score_file(ts, det, window, STANDARD)
    expected = 1.0 - 0.11 + 0.11 * scaled_sigmoid(5 / 9)
    assert s.score == pytest.approx(expected)
    assert (s.tp, s.fp, s.fn, s.tn, s.windows) == (2, 2, 8, 73, 1)  # 85 scored rows: 10 in the window, 75 outside
    missed = score_file(ts, [False] * 100, window, STANDARD)
    assert missed.score == -1.0
    assert normalised([missed], STANDARD) == 0.0
    assert normalised([s], STANDARD) == pytest.approx(100 * (expected + 1) / 2)


@needs_data
@pytest.mark.parametrize("profile", list(PROFILE_KEYS))
def test_reproduces_published_numenta_scores(profile: str) -> None:
    cost = load_profiles(DATA)[profile]
    windows = load_windows(DATA)
    key = PROFILE_KEYS[profile]
    published = {
        r["File"]: r for r in csv.DictReader((DATA / f"published_results/numenta/numenta_{key}_scores.csv").open())
    }
    files = nab_files(DATA)
    assert len(files) == 24
    scores = []
    for name in files:
        folder, base = name.split("/")
        with (DATA / "published_results" / "numenta_raw" / folder / f"numenta_{base}").open() as fh:
            rows = list(csv.DictReader(fh))
        threshold = float(published[name]["Threshold"])
        s = score_file(
            [r["timestamp"][:19] for r in rows], [float(r["anomaly_score"]) >= threshold for r in rows],
            windows[name], cost,
        )
        pub = published[name]
        assert s.score == pytest.approx(float(pub["Score"]), abs=1e-9), name
        assert (s.tp, s.tn, s.fp, s.fn, s.total) == tuple(int(pub[c]) for c in ("TP", "TN", "FP", "FN", "Total_Count"))
        scores.append(s)
    # DERIVED_subset_normalised_scores.md: numenta on these 24 files.
    assert round(normalised(scores, cost), 1) == {"standard": 66.5, "reward_low_FP": 59.4, "reward_low_FN": 70.8}[profile]
