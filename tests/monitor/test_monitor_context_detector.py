"""ContextAnomalyDetector: causal, bounded state, one threshold for every series, sees context."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_scenarios import T0, firing, first_fire_time, run, times

from monitor.detectors import registry
from monitor.detectors.anomaly import RareValueDetector
from monitor.detectors.context import AnomalyLikelihood, ContextAnomalyDetector, RankWindow

DAY = 86400.0


def edges(det, t: np.ndarray, x: np.ndarray) -> list[float]:
    """Days (since T0) at which an episode starts."""
    out, was = [], False
    for ti, xi in zip(t, x, strict=True):
        active = det.update(float(ti), float(xi)).active
        if active and not was:
            out.append((ti - T0) / DAY)
        was = active
    return out


def daily_cycle(rng: np.random.Generator, days: int = 14) -> tuple[np.ndarray, np.ndarray]:
    t = T0 + np.arange(0, days * DAY, 300.0)  # NAB's 5-min cadence
    return t, 50 + 20 * np.sin(2 * np.pi * (t - T0) / DAY) + rng.normal(0, 2, len(t))


def test_output_at_t_does_not_depend_on_later_data() -> None:
    rng = np.random.default_rng(0)
    t, x = daily_cycle(rng, 6)
    other = x.copy()
    cut = 1200
    other[cut:] = rng.normal(500, 50, len(x) - cut)  # a wildly different future
    a, b = ContextAnomalyDetector(), ContextAnomalyDetector()
    for i in range(cut):
        fa, fb = a.update(t[i], x[i]), b.update(t[i], other[i])
        assert fa == fb
    assert any(b.update(t[i], other[i]).active for i in range(cut, cut + 50))  # the future did differ


def test_flat_stretch_inside_the_daily_range_is_found_where_value_rarity_sees_nothing() -> None:
    rng = np.random.default_rng(1)
    t, x = daily_cycle(rng)
    flat = (t >= T0 + 11 * DAY + 4 * 3600) & (t < T0 + 11 * DAY + 12 * 3600)
    bad = x.copy()
    bad[flat] = 50 + rng.normal(0, 2, int(flat.sum()))  # the cycle stops at its mean: never out of range
    assert edges(ContextAnomalyDetector(), t, x) == []
    found = edges(ContextAnomalyDetector(), t, bad)
    assert len(found) == 1 and 11 + 4 / 24 <= found[0] < 11 + 6 / 24  # within 2 h of the onset
    start = 11 + 4 / 24
    assert edges(RareValueDetector(), t, bad) == edges(RareValueDetector(), t, x)  # blind to it
    assert not any(start <= d < 11.5 for d in edges(RareValueDetector(), t, bad))


@pytest.mark.parametrize("scale,offset", [(1000.0, 0.0), (1e-6, 3.0)])
def test_decisions_do_not_depend_on_units(scale: float, offset: float) -> None:
    rng = np.random.default_rng(2)
    t = T0 + 30.0 * np.arange(3000)
    x = rng.lognormal(0, 1, len(t))
    x[2500:2520] *= 6
    base = edges(ContextAnomalyDetector(), t, x)
    assert base and edges(ContextAnomalyDetector(), t, x * scale + offset) == base


def test_one_threshold_serves_very_different_noise() -> None:
    """The likelihood measures each series against its own habits: the share of samples past a tail
    surprise of 3 is of one order for Gaussian, heavy-tailed, bounded and discrete noise of any scale
    (raw rarity alone differs by far more: a lognormal's raw surprise is rarely small)."""
    n = 5000
    gens = {"normal": lambda r: r.normal(0, 1, n), "lognormal": lambda r: 1e6 * r.lognormal(0, 1.5, n),
            "uniform": lambda r: r.uniform(0, 1e-3, n), "poisson": lambda r: r.poisson(3, n).astype(float)}
    rates = {}
    for name, gen in gens.items():
        d = ContextAnomalyDetector()
        x = gen(np.random.default_rng(3))
        tails = np.array([d.update(T0 + 300.0 * i, v).details["likelihood_surprise"] for i, v in enumerate(x)])
        rates[name] = float(np.mean(tails[400:] >= 3.0))
    assert all(0.0005 <= r <= 0.02 for r in rates.values()), rates
    assert max(rates.values()) <= 5 * min(rates.values()), rates


def test_likelihood_is_a_gaussian_tail_of_the_short_mean() -> None:
    lik = AnomalyLikelihood(short=1, long=1000, min_sd=1e-9)
    rng = np.random.default_rng(4)
    for v in rng.normal(0, 1, 1000):
        lik.update(float(v))
    assert lik.update(3.0) == pytest.approx(-np.log10(0.00135), abs=0.15)  # P(Z > 3) ~ 0.00135
    assert lik.update(0.0) == pytest.approx(np.log10(2), abs=0.1)  # the median: tail 1/2


def test_state_stays_bounded_by_history() -> None:
    d = ContextAnomalyDetector(history=500, min_history=50)
    rng = np.random.default_rng(5)
    for i in range(3000):
        d.update(T0 + 300.0 * i, float(rng.normal()))
    assert all(len(w) <= 500 for w in d._features._windows)
    assert len(d._likelihood) <= 500
    base = d._features._baseline
    assert base is not None and len(base._mean[0]) <= 48 and len(base._mean[1]) <= 7 * 48


def test_rank_window_tail_probability() -> None:
    w = RankWindow(100)
    for v in range(100):
        w.add(float(v))
    assert w.p_value(50.0) == pytest.approx(1.0)
    assert w.p_value(0.0) == pytest.approx(0.02)  # one of 100 as low or lower, two-sided
    assert w.p_value(1000.0) < w.p_value(100.0) < 0.02  # beyond the range: ordered by excess
    w.add(100.0)  # the oldest (0.0) leaves the window
    assert len(w) == 100 and w.p_value(0.0) < 0.02 and w.p_value(1.0) == pytest.approx(0.02)


def test_rule_parameters_are_checked() -> None:
    assert isinstance(registry.build("context_anomaly", {}), ContextAnomalyDetector)
    with pytest.raises(ValueError):
        ContextAnomalyDetector(threshold=0)
    with pytest.raises(ValueError):
        ContextAnomalyDetector(history=100, min_history=200)


def test_fast_series_are_judged_in_five_minute_means() -> None:
    """30-s samples: one judgement per 10 samples (the same per-day false-alarm budget as 5-min data);
    bucket 0 judges every sample."""
    rng = np.random.default_rng(7)
    t = T0 + 30.0 * np.arange(3000)
    x = rng.normal(0, 1, len(t))
    bucketed, every = ContextAnomalyDetector(), ContextAnomalyDetector(bucket=0)
    fb = [bucketed.update(ti, xi).details.get("raw_surprise") for ti, xi in zip(t, x, strict=True)]
    fe = [every.update(ti, xi).details.get("raw_surprise") for ti, xi in zip(t, x, strict=True)]
    assert bucketed._group == 10 and every._group == 1
    assert len(bucketed._likelihood) == (3000 // 10) - 100 and len(every._likelihood) == 3000 - 100
    assert len({i for i in range(2000, 3000) if fb[i] != fb[i - 1]}) <= 100 < len(
        {i for i in range(2000, 3000) if fe[i] != fe[i - 1]})


def test_default_rule_flags_a_grad_norm_burst_inside_its_range() -> None:
    """UnusualTrainingMetric on a 60-s step series: an hour of larger, still in-range gradient norms
    fires one alert labelled with the signal; the same run without it fires none."""
    t = times(24 * 3600, 60.0)
    rng = np.random.default_rng(6)
    healthy = 1.5 * np.exp(rng.normal(0, 0.3, len(t)))
    burst = healthy.copy()
    k = (t - T0 >= 20 * 3600) & (t - T0 < 21 * 3600)
    # ~1.8x more for an hour, never beyond the healthy run's own range
    burst[k] = np.minimum(1.5 * np.exp(rng.normal(0.6, 0.3, int(k.sum()))), healthy.max())
    labels = {"model": "actor", "node": "gpu-07"}
    records = run([("verl_grad_norm", labels, t, burst)])
    hits = firing(records, "UnusualTrainingMetric")
    assert len(hits) == 1 and hits[0]["labels"]["signal"] == "grad_norm"
    started = first_fire_time(records, "UnusualTrainingMetric")
    assert started is not None and 20 * 3600 <= started - T0 < 21 * 3600
    assert hits[0]["labels"]["severity"] == "P3" and "template error" not in hits[0]["annotations"]["summary"]
    assert firing(run([("verl_grad_norm", labels, t, healthy)]), "UnusualTrainingMetric") == []


def test_every_unusual_training_metric_rule_names_its_signal_and_renders() -> None:
    from monitor.evaluation.rules import load_rule_files

    rules = [r for r in load_rule_files(None) if r.alert == "UnusualTrainingMetric"]
    assert {r.labels["signal"] for r in rules} == {"entropy", "grad_norm", "clip_fraction", "critic_loss",
                                                   "tokens_per_second"}
    details = ContextAnomalyDetector().update(T0, 1.0).details
    for r in rules:
        assert r.severity == "P3" and r.conditions[0].detector_type == "context_anomaly"
        ann = r.render({"labels": {"node": "gpu-01", "model": "actor"}, "value": 1.25, "details": details,
                        "series": {}})
        assert "template error" not in ann["summary"] and "gpu-01" in ann["summary"] and ann["runbook"]
