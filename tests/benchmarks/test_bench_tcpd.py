"""TCPDBench metrics on hand-worked examples and against the published `zero` scores; the benchmark CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_datasets import TCPD, needs

from benchmarks import tcpd
from benchmarks._tcpd_metrics import covering, f_measure, segments, true_positives

ROOT = Path(__file__).resolve().parents[2]
DATA = TCPD
needs_data = needs(TCPD, "TCPD")


def test_true_positives_never_reuse_a_prediction() -> None:
    assert true_positives({1, 10, 20, 23}, {3, 8, 20}) == {1, 10, 20}  # 23's only neighbour 20 is taken
    assert true_positives({10}, {16}) == set()  # margin 5
    assert true_positives(set(), {1, 2}) == set()


def test_f_measure_combines_annotators() -> None:
    # X = {0, 10, 40}; union {0, 10, 20} -> P = 2/3; recall a: 2/3, b: 2/2 -> R = 5/6; F1 = 20/27.
    assert f_measure({"a": [10, 20], "b": [10]}, [10, 40]) == pytest.approx(20 / 27)
    assert f_measure({"a": [10]}, [12]) == pytest.approx(1.0)
    assert f_measure({"a": []}, []) == pytest.approx(1.0)  # only the trivial start point


def test_covering_by_hand() -> None:
    assert segments([5], 10) == [range(0, 5), range(5, 10)]
    assert covering({"a": [5]}, [], 10) == pytest.approx(0.5)
    # truth [0,5) [5,10) vs predicted [0,4) [4,10): (5 * 4/5 + 5 * 5/6) / 10
    assert covering({"a": [5]}, [4], 10) == pytest.approx((4 + 25 / 6) / 10)
    assert covering({"a": [5], "b": []}, [], 10) == pytest.approx(0.75)


@needs_data
def test_metrics_reproduce_published_zero_method_per_series() -> None:
    annotations = json.loads((DATA / "annotations.json").read_text())
    pub_f1 = json.loads((DATA / "published_results_TCPDBench/default_f1_scores.json").read_text())
    pub_cover = json.loads((DATA / "published_results_TCPDBench/default_cover_scores.json").read_text())
    series = tcpd.univariate_series(DATA)
    assert len(series) == 25
    for name, values in series.items():
        assert f_measure(annotations[name], []) == pytest.approx(pub_f1[name]["zero"], abs=1e-12), name
        assert covering(annotations[name], [], len(values)) == pytest.approx(pub_cover[name]["zero"], abs=1e-12)


def test_profile_finds_two_steps_in_a_short_series() -> None:
    rng = np.random.default_rng(3)
    values = list(np.concatenate([rng.normal(m, 1.0, 60) for m in (10, 20, 12)]))
    spacing, params = tcpd.PROFILES["tcpd"]
    cps = tcpd.change_points(values, spacing, params)
    assert len(cps) == 2 and abs(cps[0] - 60) <= 2 and abs(cps[1] - 120) <= 2


@needs_data
def test_cli_last_line() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tcpd.py"), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 26
    last = json.loads(lines[-1])
    assert set(last) == {"default_f1", "default_cover"} and 0 < last["default_f1"] <= 1
