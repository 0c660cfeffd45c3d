"""The detectors' scipy calls give scipy's own numbers, and the monitor starts without importing scipy."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import special, stats

from monitor.detectors import lazy_scipy


def test_the_monitor_imports_neither_scipy_stats_nor_scipy_special() -> None:
    code = ("import sys, monitor.daemon, monitor.serve; "
            "print(sorted(m for m in ('scipy.stats', 'scipy.special') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_tabled_normal_quantiles_are_ndtri_bit_for_bit() -> None:
    for q, z in lazy_scipy._NDTRI.items():
        assert z == float(special.ndtri(q)) == float(stats.norm.ppf(q))
    assert lazy_scipy.norm_ppf(0.995) == float(stats.norm.ppf(0.995))  # not tabled: scipy itself


def test_normal_tails_are_scipy_norms() -> None:
    for z in np.random.default_rng(0).normal(0, 4, 500).tolist() + [0.0, -40.0, 40.0]:
        assert lazy_scipy.norm_sf(z) == float(stats.norm.sf(z))
        assert lazy_scipy.norm_cdf(z) == float(stats.norm.cdf(z))


def test_ks_2samp_of_equal_sizes_imports_no_scipy_stats() -> None:
    # a KS detector's recent and reference windows hold the same count at ~2x its recent window (10 + 10 min
    # of a jittered 5-s scrape): importing scipy.stats there was a ~60 MiB step in the monitor's resident set
    code = ("import sys, numpy as np; from monitor.detectors.lazy_scipy import ks_2samp; "
            "r = np.random.default_rng(5); x, y = r.normal(size=120), r.normal(0.5, 1, size=120); "
            "res = ks_2samp(x, y); print(repr((res.statistic, res.pvalue)), 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=120), rng.normal(0.5, 1, size=120)
    want = stats.ks_2samp(x, y)
    assert want.pvalue < 0.05  # a shift the exact formula has to sum, not the h == 0 shortcut
    assert out[-1] == "False"
    statistic, pvalue = (float(v) for v in " ".join(out[:-1]).strip("()").split(","))
    assert statistic == float(want.statistic)
    assert math.isclose(pvalue, float(want.pvalue), rel_tol=1e-12)


def test_normal_tails_import_no_scipy_special() -> None:
    # the drift detector's first test (at half its window) imported scipy.special: ~25 MiB for one ufunc
    code = ("import sys; from monitor.detectors.lazy_scipy import norm_sf, norm_cdf; "
            "print(repr(norm_sf(1.7)), repr(norm_cdf(-2.5)), 'scipy.special' in sys.modules, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [repr(float(stats.norm.sf(1.7))), repr(float(stats.norm.cdf(-2.5))), "False", "False"]


@pytest.mark.parametrize("kind", ["shifted", "ties", "rounded", "same", "same_large"])
def test_ks_2samp_is_scipys_statistic_and_p_value(kind: str) -> None:
    rng = np.random.default_rng({"shifted": 1, "ties": 2, "rounded": 3, "same": 4, "same_large": 5}[kind])
    for _ in range(150):
        n1, n2 = int(rng.integers(1, 150)), int(rng.integers(1, 600))
        if kind == "shifted":
            x, y = rng.normal(size=n1), rng.normal(0.4, 1, size=n2)
        elif kind == "ties":
            x, y = rng.integers(0, 4, n1).astype(float), rng.integers(0, 5, n2).astype(float)
        elif kind == "rounded":
            x, y = np.round(rng.normal(size=n1), 2), np.round(rng.normal(1.5, 1, size=n2), 2)
        elif kind == "same":
            x, y = rng.normal(size=n1), rng.normal(size=n1)
        else:  # equal sizes of the windows a detector tests (120 vs 120 at 10 + 10 min of 5-s samples)
            n = int(rng.integers(100, 800))
            x, y = rng.normal(size=n), rng.normal(float(rng.uniform(0, 0.4)), 1, size=n)
        want, got = stats.ks_2samp(x, y), lazy_scipy.ks_2samp(x, y)
        assert got.statistic == float(want.statistic)
        if len(x) != len(y):
            assert got.pvalue == float(want.pvalue)  # the compiled kernel scipy itself runs
        else:  # scipy sums a closed form here: the same lattice paths, counted otherwise
            assert math.isclose(got.pvalue, float(want.pvalue), rel_tol=1e-12, abs_tol=1e-300), (len(x), want)
            assert [got.pvalue < a for a in (0.001, 0.01, 0.05)] == [want.pvalue < a for a in (0.001, 0.01, 0.05)]
