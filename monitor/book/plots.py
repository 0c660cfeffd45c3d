"""Regression charts for drift and leak alerts (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from alerting.model import rfc3339


def render_fit(path: Path, t: np.ndarray, v: np.ndarray, details: dict[str, float], title: str,
               ylabel: str = "") -> Path | None:
    """``fit_png`` written to ``path``; None for an empty series."""
    png = fit_png(t, v, details, title, ylabel)
    return None if png is None else write_png(path, png)


def write_png(path: Path, png: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # written whole, then renamed: a notifier waiting for the file never reads half a PNG
    part = path.with_name(path.name + ".part")
    part.write_bytes(png)
    part.replace(path)
    return path


def fit_png(t: np.ndarray, v: np.ndarray, details: dict[str, float], title: str,
            ylabel: str = "") -> bytes | None:
    """Series (last window) with the detector's fitted line, as PNG bytes; ``details`` carry
    ``slope_per_min``, ``intercept`` (value at ``t_ref``), ``t_ref`` and (a drift ramp) ``trend_end`` as
    the drift and leak detectors report them, and ``onset``: when the alert's condition began (marked).
    ``ylabel``: the series' name, on the value axis."""
    if len(t) == 0:
        return None
    # Imported on first plot: matplotlib costs half a second of start-up the daemon rarely needs.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = details.get("window_start", float(t[0]))
    keep = t >= start - (t[-1] - start)  # show as much context before the window as inside it
    t, v = t[keep], v[keep]
    minutes = (t - t[-1]) / 60.0
    fig, ax = plt.subplots(figsize=(8, 3.5), dpi=90)
    ax.plot(minutes, v, lw=0.8, color="#4477aa", label="series")
    if "slope_per_min" in details and "intercept" in details:
        t_ref = details.get("t_ref", start)
        fx = t[t >= start]
        # a drift ramp that ended inside the window holds its level after ``trend_end``
        dt = np.clip(fx - t_ref, None, details.get("trend_end", np.inf) - t_ref)
        fy = details["intercept"] + details["slope_per_min"] * dt / 60.0
        label = f"fit: {details['slope_per_min']:.4g}/min"
        if "p_value" in details:
            label += f", p={details['p_value']:.2g}"
        ax.plot((fx - t[-1]) / 60.0, fy, color="#cc3311", lw=2, label=label)
    onset = details.get("onset")
    if onset is not None and np.isfinite(onset) and t[0] <= onset <= t[-1]:
        ax.axvline((onset - t[-1]) / 60.0, color="#b3141b", lw=1.2, ls="--",
                   label=f"condition since {rfc3339(float(onset))[11:19]}")
    ax.set_xlabel(f"minutes before {rfc3339(float(t[-1]))}")
    ax.set_ylabel(ylabel or "value", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
