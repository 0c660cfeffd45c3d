"""The drift detector's own OLS/HAC against statsmodels' (a dev dependency kept for this check)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.detectors.drift import OLSFit, andrews_lags, best_trend


@pytest.fixture(scope="module")
def statsmodels_ols() -> type:
    """Imported when a test asks (0.5 s): not in every worker that only collects this file."""
    return pytest.importorskip("statsmodels.regression.linear_model").OLS


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.normal(size=n)
    out = np.empty(n)
    out[0] = e[0]
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("phi", [0.0, 0.5, 0.95])
def test_slope_and_standard_errors_match_statsmodels(seed: int, phi: float, statsmodels_ols: type) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 400))
    x = np.sort(rng.uniform(0, 90, n))
    y = 0.02 * np.clip(x - 30, 0, None) + 3.0 + ar1(rng, n, phi) * rng.uniform(0.01, 2.0)
    design = best_trend(x, y)[2]  # the hinge or ramp the detector would fit
    ours, ref = OLSFit(y, design), statsmodels_ols(y, design).fit()
    np.testing.assert_allclose(ours.params, ref.params, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.resid, ref.resid, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ours.bse, ref.bse, rtol=1e-9)
    for lags in (1, andrews_lags(phi, n), n // 4):
        hac = ref.get_robustcov_results(cov_type="HAC", maxlags=lags)
        np.testing.assert_allclose(ours.hac_bse(lags), hac.bse, rtol=1e-9)


def test_hac_widens_the_slope_error_on_autocorrelated_residuals() -> None:
    rng = np.random.default_rng(7)
    x = np.arange(300.0)
    design = np.column_stack([np.ones_like(x), x])
    fit = OLSFit(0.001 * x + ar1(rng, 300, 0.9), design)
    assert fit.hac_bse(andrews_lags(0.9, 300))[1] > 2 * fit.bse[1]
