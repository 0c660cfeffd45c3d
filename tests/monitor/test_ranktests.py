"""The level-shift detector's rank tests (``monitor/detectors/ranktests.py``) give scipy.stats' numbers bit for
bit, and calling them imports neither scipy.stats nor scipy.special."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from monitor.detectors import lazy_scipy, ranktests


def _samples(rng: np.random.Generator, kind: str, m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    if kind == "shifted":
        return rng.normal(size=m), rng.normal(0.7, 1, size=n)
    if kind == "ties":  # integer-valued gauges: every test takes the tie-corrected normal approximation
        return rng.integers(0, 5, m).astype(float), rng.integers(0, 6, n).astype(float)
    if kind == "rounded":
        return np.round(rng.normal(size=m), 1), np.round(rng.normal(1, 1, size=n), 1)
    if kind == "constant":
        return np.full(m, 2.0), np.full(n, 2.0)
    return rng.normal(3, 1, size=m), rng.normal(size=n)  # far apart: tiny p-values


@pytest.mark.parametrize("kind", ["shifted", "ties", "rounded", "constant", "apart"])
def test_mann_whitney_u_is_scipys_p_value(kind: str) -> None:
    rng = np.random.default_rng(sum(map(ord, kind)))
    exact = 0
    for i in range(300):
        # the detector's shapes: a recent window of 1-8 (exact null) or more samples against a baseline of up to
        # 15x the recent window (the shipped rules' largest ratio: 1800 s against 120 s)
        m = int(rng.integers(1, 9)) if i % 2 else int(rng.integers(9, 40))
        n = int(rng.integers(1, 15 * m + 10))
        x, y = _samples(rng, kind, m, n)
        for side in ("less", "greater"):
            got = lazy_scipy.mannwhitneyu(x, y, side)
            want = stats.mannwhitneyu(x, y, alternative=side)
            assert got.pvalue == float(want.pvalue), (m, n, side)
            assert got.statistic == float(want.statistic)
        exact += min(m, n) <= ranktests.EXACT_MAX and len(np.unique(np.concatenate([x, y]))) == m + n
    if kind in ("shifted", "apart"):
        assert exact > 100  # the exact null distribution was exercised, not only the normal approximation


def test_the_exact_null_distribution_counts_every_ordering() -> None:
    # [m + n choose m]_q: coefficients sum to C(m + n, m), symmetric, and U = 0 and U = m n one ordering each
    for m, n in [(1, 1), (3, 5), (8, 30), (4, 200)]:
        counts = ranktests._null_counts(m, n)
        assert len(counts) == m * n + 1 and sum(counts) == math.comb(m + n, m)
        assert counts == counts[::-1] and counts[0] == counts[-1] == 1
    assert ranktests._null_counts(2, 2) == [1, 1, 2, 1, 1]  # the 6 orderings of xxyy by U


@pytest.mark.parametrize("kind", ["shifted", "ties", "rounded", "constant", "apart"])
def test_kendall_tau_against_time_is_scipys(kind: str) -> None:
    rng = np.random.default_rng(100 + sum(map(ord, kind)))
    for _ in range(150):
        n = int(rng.integers(1, 700))  # past the block of rows compared at once
        _, y = _samples(rng, kind, 1, n)
        y = y + (np.arange(n) * rng.uniform(-0.01, 0.01) if kind == "shifted" else 0.0)
        got = lazy_scipy.kendalltau(np.arange(n), y).statistic
        want = float(stats.kendalltau(np.arange(n), y).statistic)
        assert got == want or (np.isnan(got) and np.isnan(want)), (n, got, want)


def test_the_rank_tests_import_neither_scipy_stats_nor_scipy_special() -> None:
    code = ("import sys, numpy as np; from monitor.detectors.lazy_scipy import kendalltau, mannwhitneyu; "
            "r = np.random.default_rng(0); x, y = r.normal(size=6), r.normal(1, 1, size=40); "
            "print(repr(mannwhitneyu(x, y, 'less').pvalue), repr(kendalltau(np.arange(40), y).statistic), "
            "'scipy.stats' in sys.modules, 'scipy.special' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=6), rng.normal(1, 1, size=40)
    assert out == [repr(float(stats.mannwhitneyu(x, y, alternative="less").pvalue)),
                   repr(float(stats.kendalltau(np.arange(40), y).statistic)), "False", "False"]
