"""The evaluator's shortcuts on the per-sample path give what the full path gives, sample for sample."""

from __future__ import annotations

import random

import numpy as np

from monitor.detectors.base import median
from monitor.detectors.events import CounterIncreaseDetector
from monitor.detectors.threshold import BaselineRatioDetector
from monitor.evaluation.evaluator import Evaluator
from monitor.evaluation.rules import load_rule_files
from monitor.series.store import Series


def _state(d: CounterIncreaseDetector) -> tuple:
    return d._last, None if d._incs is None else list(d._incs)


def test_counter_quiet_only_where_update_changes_nothing_and_finds_nothing() -> None:
    rng = random.Random(7)
    quiet_seen = 0
    for min_increase in (1.0, 0.0, 5.0):
        d = CounterIncreaseDetector(window=60.0, min_increase=min_increase)
        value = 0.0
        for i in range(3000):
            t = 5.0 * i
            if rng.random() < 0.05:
                value += rng.choice([1.0, 3.0])
            elif rng.random() < 0.01:
                value = 0.0  # a restart
            before = _state(d)
            quiet = d.quiet(t, value)
            f = d.update(t, value)
            if quiet:
                quiet_seen += 1
                assert not f.active and _state(d) == before
            if min_increase <= 0:
                assert not quiet  # a zero minimum is met by a zero increase: update finds it
    assert quiet_seen > 1000


def test_evaluator_bindings_end_as_without_the_quiet_path(monkeypatch) -> None:
    """Default rules over error counters that mostly stay put, rise now and then and reset: every binding's
    state (active, since, finding, last time, samples) and every tick's candidates match a run where
    ``quiet`` always says no."""
    rules = load_rule_files(None)

    def run(quiet: bool) -> list:
        if not quiet:
            monkeypatch.setattr(CounterIncreaseDetector, "quiet", lambda self, t, v: False)
        ev = Evaluator(rules)
        names = ["verl_gpu_xid_errors_total", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                 "verl_rollout_worker_restarts_total", "verl_nonfinite_steps_total"]
        series = [Series(n, {"node": f"gpu-{k}", "gpu": "0", "job": "dcgm"}, 17, i)
                  for i, (n, k) in enumerate((n, k) for n in names for k in range(3))]
        rng = random.Random(3)
        values = [0.0] * len(series)
        out = []
        for r in range(400):
            t = 1000.0 + 5.0 * r
            for i, s in enumerate(series):
                if rng.random() < 0.02:
                    values[i] += 1.0
                elif rng.random() < 0.005:
                    values[i] = 0.0
                s.append(t, values[i])
                ev.observe(s, t, values[i], t + 0.01)
            e = ev.tick(t + 0.5)
            out.append((sorted((c.fp, c.since) for c in e.candidates),
                        sorted((fp, b.said) for fp, group in e.held.items() for b in group.values())))
        for s in series:
            out.append([(b.active, b.since, b.finding, b.last_t, b.samples) for b in s.bound])
        # three of the names bind counter_increase itself, the fourth through CadenceScaled (no shortcut)
        assert sum(isinstance(b.detector, CounterIncreaseDetector) for s in series for b in s.bound) == 9
        assert any(out[:400])  # some fired
        return out

    assert run(True) == run(False)


def test_median_is_numpys() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        xs = [rng.choice([rng.random(), rng.uniform(0, 1e6), 0.5 * rng.randint(0, 6)]) for _ in range(rng.randint(1, 400))]
        assert median(xs) == float(np.median(xs))  # lists and deques of the detectors, as numpy


def test_baseline_ratio_fires_on_a_jump() -> None:
    d = BaselineRatioDetector(window=300.0, ratio=3.0, min_samples=5, every=1.0, recent=3)
    fired = [d.update(5.0 * i, 1.0 + 0.01 * (i % 3) if i < 60 else 10.0).active for i in range(70)]
    assert not any(fired[:60]) and fired[-1]
