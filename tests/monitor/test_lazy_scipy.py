"""The detectors' scipy calls give scipy's own numbers, and the monitor starts without importing scipy."""

from __future__ import annotations

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


@pytest.mark.parametrize("kind", ["shifted", "ties", "rounded", "same"])
def test_ks_2samp_is_scipys_statistic_and_p_value(kind: str) -> None:
    rng = np.random.default_rng({"shifted": 1, "ties": 2, "rounded": 3, "same": 4}[kind])
    for _ in range(150):
        n1, n2 = int(rng.integers(1, 150)), int(rng.integers(1, 600))
        if kind == "shifted":
            x, y = rng.normal(size=n1), rng.normal(0.4, 1, size=n2)
        elif kind == "ties":
            x, y = rng.integers(0, 4, n1).astype(float), rng.integers(0, 5, n2).astype(float)
        elif kind == "rounded":
            x, y = np.round(rng.normal(size=n1), 2), np.round(rng.normal(1.5, 1, size=n2), 2)
        else:
            x, y = rng.normal(size=n1), rng.normal(size=n1)  # equal sizes: scipy's own path
        want, got = stats.ks_2samp(x, y), lazy_scipy.ks_2samp(x, y)
        assert (got.statistic, got.pvalue) == (float(want.statistic), float(want.pvalue))
