"""The few scipy functions the detectors call, imported on first call rather than with the monitor.

``import scipy.stats`` costs ~72 MiB of resident memory and ~0.5 s, ``scipy.special`` ~26 MiB; most
deployments run detectors that never call them (threshold, counters, staleness, level shifts that
never pass their effect-size floor), so a sidecar should not carry them from its first second. The
functions are scipy's own, so every result is the same bit for bit: ``norm_ppf`` is ``norm.ppf`` with
loc 0 and scale 1, i.e. ``scipy.special.ndtri``, and ``norm_sf``/``norm_cdf`` are ``ndtr(-z)``/``ndtr(z)``
(what ``scipy.stats.norm`` computes after standardising).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from monitor.detectors import ranktests

# ndtri of the quantiles the shipped rules use (confidence 0.95: 0.5 + 0.95 / 2), as scipy.special gives
# them (tests/monitor/test_lazy_scipy.py checks each against ndtri): a leak detector built per series
# would otherwise import scipy.special at start-up for one constant.
_NDTRI = {0.975: 1.959963984540054}


def norm_ppf(q: float) -> float:
    known = _NDTRI.get(q)
    if known is not None:
        return known
    from scipy.special import ndtri
    return float(ndtri(q))


def norm_sf(z: float) -> float:
    return float(_ndtr()(-z))


def norm_cdf(z: float) -> float:
    return float(_ndtr()(z))


def _scipy_extension(subpackage: str, name: str) -> Any:
    """One of scipy's compiled modules, loaded from its file without importing its package (whose
    ``__init__`` imports everything else in it). None where the file is not there (another scipy
    layout) or does not load on its own: the caller falls back to the package."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / subpackage
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"{name}{suffix}"
        if path.is_file():
            full = f"scipy.{subpackage}.{name}"
            loader = importlib.machinery.ExtensionFileLoader(full, str(path))
            module_spec = importlib.util.spec_from_file_location(full, path, loader=loader)
            if module_spec is None:
                return None
            module = importlib.util.module_from_spec(module_spec)
            try:
                loader.exec_module(module)
            except ImportError:
                return None
            return module
    return None


@cache
def _special() -> Any:
    """``scipy.special``'s ufuncs ``ndtr`` and ``binom`` from the compiled module that defines them
    (``scipy.special._special_ufuncs``, ~1 MiB resident) rather than through ``import scipy.special``
    (~25 MiB, 225 modules): the drift detector's first test (at half its window, ~45 min in) grew the
    monitor's resident set by that much for good. The same compiled functions, so the same bits
    (tests/monitor/test_lazy_scipy.py); libm's ``erfc`` would differ from ``ndtr`` in the last places."""
    module = _scipy_extension("special", "_special_ufuncs")
    if module is None or not all(hasattr(module, f) for f in ("ndtr", "binom")):
        import scipy.special as module
    return module


def _ndtr() -> Callable[[float], Any]:
    return _special().ndtr  # type: ignore[no-any-return]


def kendalltau(x: Any, y: Any) -> Any:
    """``scipy.stats.kendalltau(x, y).statistic`` for x = 0, 1, ..., n - 1 (time order, what the level-shift
    detector passes), from ``ranktests``: ``scipy.stats`` for any other x."""
    x = np.asarray(x)
    if x.ndim == 1 and np.array_equal(x, np.arange(len(x))):
        return ranktests.kendall_tau_b_trend(y)
    from scipy.stats import kendalltau as f
    return f(x, y)


def mannwhitneyu(x: Any, y: Any, alternative: str) -> Any:
    """``scipy.stats.mannwhitneyu(x, y, alternative=...)`` (one-sided, method 'auto') from ``ranktests``;
    non-finite or empty samples and other alternatives ask ``scipy.stats`` (its NaN policy is its own)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if alternative in ("greater", "less") and len(x) and len(y) and np.isfinite(x).all() and np.isfinite(y).all():
        return ranktests.mann_whitney_u(x, y, alternative, _special())
    from scipy.stats import mannwhitneyu as f
    return f(x, y, alternative=alternative)


class KSResult(NamedTuple):
    statistic: float
    pvalue: float


@cache
def _lattice_paths() -> Callable[[int, int, int, int], float] | None:
    """scipy's compiled exact two-sample KS kernel (``scipy.stats._stats_pythran``), loaded from its file
    without ``scipy.stats`` (that package's import is what costs the 72 MiB; this module ~0.7). None
    where the file is not there (another scipy layout): the caller falls back to ``scipy.stats``."""
    module = _scipy_extension("stats", "_stats_pythran")
    return None if module is None else module._compute_outer_prob_inside_method  # type: ignore[no-any-return]


def ks_2samp(x: np.ndarray, y: np.ndarray) -> KSResult:
    """``scipy.stats.ks_2samp(x, y)`` (two-sided, method 'auto'): the statistic and its exact p-value
    through scipy's own compiled lattice-path kernel; any other case (over 10 000 samples, NaN, a kernel
    that failed or is missing) asks ``scipy.stats`` itself. For different sizes that kernel is what scipy
    runs, so the p-value is scipy's bit for bit. For equal sizes scipy sums a closed form instead (in
    Python, inside ``scipy.stats``); the kernel's count of the same lattice paths agrees with it to a few
    units in the last place (tests/monitor/test_lazy_scipy.py: relative 1e-12, and no test at
    alpha 0.001-0.05 decided otherwise). Equal sizes are not rare: a detector's recent and reference windows
    hold the same count once its history is twice its recent window (10 + 10 min of a jittered 5-s
    scrape: ~1 series in 10 at minute 20), and importing ``scipy.stats`` for them grew the monitor's
    resident set by ~60 MiB for good."""
    n1, n2 = len(x), len(y)
    usable = min(n1, n2) > 0 and max(n1, n2) <= 10000
    kernel = _lattice_paths() if usable else None
    if kernel is not None and np.isfinite(x).all() and np.isfinite(y).all():  # scipy's NaN policy: its own
        a, b = np.sort(x), np.sort(y)
        both = np.concatenate([a, b])
        diff = np.searchsorted(a, both, side="right") / n1 - np.searchsorted(b, both, side="right") / n2
        low, high = float(np.clip(-diff[np.argmin(diff)], 0, 1)), float(diff[np.argmax(diff)])
        d = low if low > high else high
        g = math.gcd(n1, n2)
        lcm = (n1 // g) * n2
        h = int(np.round(d * lcm))
        if h == 0:
            return KSResult(h / lcm, 1.0)
        try:
            with np.errstate(invalid="raise", over="raise"):
                p = float(kernel(n1, n2, g, h))
        except (FloatingPointError, OverflowError):
            p = math.nan
        if 0 <= p <= 1:
            return KSResult(h * 1.0 / lcm, p)
    from scipy.stats import ks_2samp as f
    res = f(x, y)
    return KSResult(float(res.statistic), float(res.pvalue))
