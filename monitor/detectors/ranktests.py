"""Kendall's tau-b against time and the one-sided Mann-Whitney U test: the level-shift detector's two rank
statistics, written here from their textbook formulas.

Why our own: scipy's versions live in ``scipy.stats`` as Python code (``_mannwhitneyu.py``, and
``kendalltau``'s discordance count in ``scipy.stats._stats``, a compiled module that does not load
without the package); importing that package costs ~70 MiB of resident memory and 650 modules for good,
the first time a level shift passes its effect-size floors (often hours into a run). There is no lighter
library piece to call, unlike the KS kernel and ``ndtr`` (``lazy_scipy``). Results agree with
``scipy.stats.kendalltau(x, y).statistic`` and ``mannwhitneyu(x, y, alternative=...).pvalue`` (method
'auto', continuity correction) bit for bit on the inputs the detector passes
(tests/monitor/test_ranktests.py): ranks are half-integers and counts integers, so every sum below is exact,
and the few rounded steps are the formula's own.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

EXACT_MAX = 8  # the exact null distribution when one sample has at most this many values and none tie
_ROWS = 256  # pairs compared a block of rows at a time: memory stays ~_ROWS * n, not n * n


class TauResult(NamedTuple):
    statistic: float


class UResult(NamedTuple):
    statistic: float  # U of the first sample
    pvalue: float


def kendall_tau_b_trend(y: np.ndarray) -> TauResult:
    """Kendall's tau-b between time order (0, 1, ..., n - 1: no ties) and ``y``:
    tau_b = (n_c - n_d) / sqrt(n_0 - n_x) / sqrt(n_0 - n_y), with n_0 = n (n - 1) / 2 pairs, n_x = 0 ties in
    time, n_y = sum over tied groups of y of t (t - 1) / 2, and n_c - n_d = sum over pairs i < j of
    sign(y_j - y_i) (Kendall 1945, "The treatment of ties in ranking problems"). NaN when y is constant,
    has fewer than 2 values, or is not finite."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < 2 or not np.isfinite(y).all():
        return TauResult(math.nan)
    s = 0
    for lo in range(0, n, _ROWS):
        block = y[lo:lo + _ROWS]
        signs = np.sign(y[None, :] - block[:, None])  # row i: sign(y_j - y_i) for every j
        cols = np.arange(n)[None, :]
        rows = np.arange(lo, lo + len(block))[:, None]
        s += int(np.sum(signs, where=cols > rows))
    pairs = n * (n - 1) // 2
    _, counts = np.unique(y, return_counts=True)
    y_ties = int(np.sum(counts * (counts - 1) // 2))
    if y_ties == pairs:
        return TauResult(math.nan)
    return TauResult(min(1.0, max(-1.0, float(s / np.sqrt(pairs) / np.sqrt(pairs - y_ties)))))


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n, tied values sharing the mean of their positions; and the tie group sizes."""
    uniq, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    before = np.cumsum(counts) - counts
    return (before + (counts + 1) / 2.0)[inverse], counts


def _null_counts(m: int, n: int) -> list[int]:
    """How many of the C(m + n, m) orderings of m x's and n y's give U = 0, 1, ..., m n: the coefficients
    of the Gaussian binomial [m + n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i) (Mann and
    Whitney 1947), in exact integers."""
    poly = [1]
    for i in range(1, m + 1):
        times = poly + [0] * (n + i)  # multiply by 1 - q^(n+i)
        for k in range(len(poly) - 1, -1, -1):
            times[k + n + i] -= poly[k]
        quotient = times[:]  # divide by 1 - q^i: q_k = t_k + q_(k-i)
        for k in range(i, len(quotient)):
            quotient[k] += quotient[k - i]
        poly = quotient[:len(poly) + n]
    return poly


def _exact_sf(u: int, m: int, n: int, binom: Any) -> float:
    """P(U >= u) under the null, from the exact counts: the distribution is symmetric about m n / 2, so
    for u at or above the middle it is the lower tail P(U <= m n - u); below it, 1 - P(U <= u) + P(U = u).
    Each probability is a count over C(m + n, m) as ``binom`` gives it (scipy's, a float product: for
    scipy's bits), the tail a running sum of them. scipy's own counts come from a floating-point
    recurrence that rounds once they pass 2^53 (from m = 8, n = 339: a baseline 42 times the recent
    window, past any shipped rule); these are exact, so there the two differ by ~1e-15 relative."""
    counts = _null_counts(min(m, n), max(m, n))
    pmf = np.array(counts, dtype=float) / float(binom(m + n, m))
    cdf = np.cumsum(pmf)
    low = m * n - u
    if u >= low:
        return float(cdf[low])
    return float(1.0 - cdf[u] + pmf[u])


def mann_whitney_u(x: np.ndarray, y: np.ndarray, alternative: str, special: Any) -> UResult:
    """One-sided Mann-Whitney U test of ``x`` against ``y`` ('greater': x tends larger; 'less': smaller).
    U_x = R_x - m (m + 1) / 2 from the average ranks of the pooled samples; the statistic tested is U_x for
    'greater', m n - U_x for 'less'. With a sample of at most EXACT_MAX values and no ties: the exact
    null tail; otherwise the normal approximation with tie and continuity corrections,
    z = (U - m n / 2 - 1/2) / sigma, sigma = sqrt(m n / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1)))),
    p = Phi(-z). ``special`` gives ``ndtr`` (Phi) and ``binom``: scipy's compiled ones
    (``lazy_scipy._special``). ``x`` and ``y`` must be finite and non-empty."""
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be 'greater' or 'less', not {alternative!r}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    m, n = len(x), len(y)
    ranks, ties = _average_ranks(np.concatenate([x, y]))
    u_x = float(np.sum(ranks[:m])) - m * (m + 1) / 2
    u = u_x if alternative == "greater" else m * n - u_x
    if (m <= EXACT_MAX or n <= EXACT_MAX) and not (ties > 1).any():
        p = _exact_sf(int(u), m, n, special.binom)
    else:
        total = m + n
        tie_term = float(np.sum(ties.astype(float) ** 3 - ties))
        variance = m * n / 12 * ((total + 1) - tie_term / (total * (total - 1)))
        centred = u - m * n / 2 - 0.5
        # all values tied: no spread, and U sits at its mean (centred -0.5: p = 1)
        z = centred / math.sqrt(variance) if variance > 0 else math.copysign(math.inf, centred)
        p = float(special.ndtr(-z))
    return UResult(u_x, min(1.0, max(0.0, p)))
