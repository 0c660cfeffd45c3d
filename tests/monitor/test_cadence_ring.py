"""A re-sized step-cadence detector replays its samples from the store's ring of its series (one copy of
them), and decides exactly as it did with a private copy: same findings, sample for sample."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.detectors.cadence import CadenceScaled
from monitor.evaluation.evaluator import Evaluator
from monitor.evaluation.rules import Condition, load_rule_files
from monitor.series.store import Series, SeriesStore

RULES = load_rule_files(None)
# one default condition a CadenceScaled wraps of each kind (detector, per_step, warm-up), absence detectors
# aside (they keep their copy)
_KINDS: dict[tuple[str, bool, bool], Condition] = {}
for _r in RULES:
    for _c in _r.conditions:
        _d = _c.new_detector()
        if isinstance(_d, CadenceScaled) and not _d.ticks:
            _KINDS.setdefault((_c.detector_type, _c.per_step, bool(_c.warmup_steps)), _c)
CONDS = list(_KINDS.values())


def run(seed: int, n: int, base: float, jumps: int, at: set[int] | None = None) -> list[tuple[float, float]]:
    """A per-step series whose step time moves ``jumps`` times (each a re-size; or at the samples ``at``)
    and whose level climbs and shifts now and then: samples the detectors both fire and clear on."""
    rng = np.random.default_rng(seed)
    at = at if at is not None else set(rng.integers(1, n, size=jumps).tolist())
    t, step, v, out = 1.7e9, base, 1e9, []
    for i in range(n):
        if i in at:
            step *= float(rng.choice([0.5, 0.7, 1.4, 2.0, 3.0]))
        t += step * float(rng.uniform(0.9, 1.1))
        v += float(rng.normal(0.0, 1e6)) + (5e6 if (i // 200) % 3 == 1 else 0.0)
        out.append((round(t, 3), round(v if rng.random() > 0.01 else v * 0.5, 1)))
    return out


def findings(cond: Condition, samples: list[tuple[float, float]], ring: bool) -> tuple[list[str], int]:
    """Each sample's finding (repr: NaN details compare), and how many times the detector was re-sized."""
    det = cond.new_detector()
    assert isinstance(det, CadenceScaled)
    series = Series("x", {}, 4096, 0)
    if ring:
        assert det.replay_from(series) == bool(det.history_samples)  # none without steps: nothing re-sizes
    out, inner, resized = [], det.inner, 0
    for t, v in samples:
        series.append(t, v)
        out.append(repr(det.update(t, v)))
        resized += det.inner is not inner
        inner = det.inner
    assert (det._history is None) == (ring or not det._held)  # one copy: the ring's (none before a sample)
    return out, resized


def _same_both_ways(conds: list[Condition], samples: list[tuple[float, float]]) -> int:
    total = 0
    for cond in conds:
        private, resized = findings(cond, samples, ring=False)
        shared, again = findings(cond, samples, ring=True)
        assert shared == private, cond
        assert again == resized
        total += resized
    return total


def test_every_step_rule_decides_the_same_from_the_ring_over_a_run_that_resizes() -> None:
    # at ~100 s a sample the steps outweigh the seconds of the scraped series' rules too: all re-size
    assert _same_both_ways(CONDS, run(7, 700, 100.0, 0, at={250, 550})) > len(CONDS)


def test_a_resize_past_the_replayed_history_decides_the_same() -> None:
    # 2300 samples, the step time moving at 400, 1300 and 2200: the last re-size is past the 2048 a re-size
    # replays, so the ring (4096) holds more than is replayed. What is replayed does not depend on the inner
    # detector: the cheaper kinds here (each re-size replays up to 2048 samples through it; the leak and
    # drift detectors took ~3.5 s a run, all 14 kinds ~40 s)
    cheap = [c for c in CONDS if c.detector_type in ("ks_shift", "level_shift", "baseline_ratio")]
    assert len(cheap) >= 3
    assert _same_both_ways(cheap, run(7, 2300, 100.0, 0, at={400, 1300, 2200})) > 3 * len(cheap)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 500), base=st.sampled_from([1.0, 5.0, 60.0, 900.0]),
       jumps=st.integers(0, 20), which=st.integers(0, 1000))
def test_ring_replay_is_the_private_replay(seed: int, n: int, base: float, jumps: int, which: int) -> None:
    cond = CONDS[which % len(CONDS)]
    samples = run(seed, n, base, jumps)
    assert findings(cond, samples, ring=True)[0] == findings(cond, samples, ring=False)[0]


def test_a_sample_the_ring_does_not_hold_moves_the_replay_to_a_private_copy() -> None:
    """A caller that feeds a sample it did not store (the ring's newest is another): from there the detector
    keeps its own copy, begun from the ring's samples it was fed, and still decides as before."""
    cond = next(c for c in CONDS if c.per_step)
    samples = run(3, 900, 30.0, 8)
    det = cond.new_detector()
    assert isinstance(det, CadenceScaled)
    series = Series("x", {}, 4096, 0)
    assert det.replay_from(series)
    got = []
    for i, (t, v) in enumerate(samples):
        if i < 500:
            series.append(t, v)
        got.append(repr(det.update(t, v)))
    assert det._ring is None and det._history is not None
    assert got == findings(cond, samples, ring=False)[0]


def test_no_ring_for_absence_detectors_or_a_ring_too_short() -> None:
    ticking = next(c.new_detector() for r in RULES for c in r.conditions
                   if isinstance(c.new_detector(), CadenceScaled) and c.new_detector().ticks)
    assert isinstance(ticking, CadenceScaled) and ticking.history_samples == 0
    assert not ticking.replay_from(Series("x", {}, 4096, 0))  # fed scrape times and refused samples
    det = CONDS[0].new_detector()
    assert isinstance(det, CadenceScaled) and det.history_samples > 0
    assert not det.replay_from(Series("x", {}, det.history_samples - 1, 0))
    det.update(1.0, 1.0)
    assert not det.replay_from(Series("x", {}, 4096, 0))  # after its first sample: the ring may lack it


def test_the_evaluator_reserves_the_ring_and_hands_it_over() -> None:
    """Bound through the evaluator as the pipeline binds: the series' ring is reserved to the replay's length
    from a short start, each step-cadence binding replays from it, and the alerts' decisions match an
    evaluator whose detectors keep their own copies (a series of the same samples whose ring is too short
    to replay from: 64)."""
    store = SeriesStore(history=lambda s: 0)
    shared = Evaluator(RULES, reserve=lambda s, n: s.reserve(store.bounded(n)))
    private = Evaluator(RULES)
    labels = {"job": "verl_jsonl", "node": "n1", "stat": "peak", "gpu": "0"}
    series = store.get_or_create("verl_gpu_memory_used_bytes", labels, "log")
    alone = Series("verl_gpu_memory_used_bytes", labels, 64, 1)
    assert series is not None and series.capacity < 2048
    states = []
    for t, v in run(11, 1500, 20.0, 10):
        series.append(t, v)
        shared.observe(series, t, v)
        alone.append(t, v)
        private.observe(alone, t, v)
        states.append([(b.active, b.since, repr(b.finding)) for b in series.bound or ()] ==
                      [(b.active, b.since, repr(b.finding)) for b in alone.bound or ()])
    assert all(states)
    assert series.capacity >= 2048
    scaled = [b.detector for b in series.bound or () if isinstance(b.detector, CadenceScaled)]
    assert len(scaled) >= 2 and all(d._ring is series and d._history is None for d in scaled)
    assert all(isinstance(b.detector, CadenceScaled) and b.detector._ring is None for b in alone.bound or ()
               if isinstance(b.detector, CadenceScaled))
    assert any(b.active for b in series.bound or ()) and not math.isnan(series.last_v)


def _scraped_leak() -> Condition:
    rule = next(r for r in RULES if r.alert == "MemoryLeakSuspected"
                and r.conditions[0].matches("DCGM_FI_DEV_FB_USED", {"gpu": "0"}))
    return rule.conditions[0]


def test_a_scraped_series_ring_holds_its_replay_not_2048_samples() -> None:
    """At a 5-s scrape the GPU-memory leak rule's re-size replays its spans twice over (30 min + 1 min, x2,
    with a 25 % margin: 930 samples), not the 2048 (2.8 h) a per-step rule keeps: the ring reserved for
    it stops there over hours."""
    store = SeriesStore(history=lambda s: 0)
    ev = Evaluator(RULES, reserve=lambda s, n: s.reserve(store.bounded(n)))
    series = store.get_or_create("DCGM_FI_DEV_FB_USED", {"gpu": "0", "node": "n1"}, "dcgm")
    assert series is not None
    rng = np.random.default_rng(5)
    for i in range(3 * 720):  # 3 h at 5 s
        t, v = 1.7e9 + 5.0 * i + float(rng.uniform(-0.1, 0.1)), 8e9 + float(rng.normal(0, 1e7))
        series.append(t, v)
        ev.observe(series, t, v)
    det = next(b.detector for b in series.bound or () if isinstance(b.detector, CadenceScaled))
    assert 920 <= det.history_samples <= 950 and det._ring is series  # 930 at 5 s (median of 5-16 jittered gaps)
    assert det.history_samples <= series.capacity < 2048


def test_a_resize_after_the_cadence_slows_replays_the_whole_new_window() -> None:
    """Hours at 5 s, then the scrape slows to 120 s a sample: the window grows to 30 x 120 s = 1 h, and the
    detector replayed into it holds that hour at once (it judges at its next evaluation; it does not wait
    an hour for the window to fill)."""
    det = _scraped_leak().new_detector()
    assert isinstance(det, CadenceScaled)
    series = Series("x", {}, 4096, 0)
    assert det.replay_from(series)
    t, inner = 1.7e9, det.inner
    for i in range(3 * 720 + 40):
        t += 5.0 if i < 3 * 720 else 120.0
        series.append(t, 8e9)
        det.update(t, 8e9)
    assert det.inner is not inner and det.history_samples == 930  # re-sized
    window = det.inner._window
    span = float(window.ts[-1] - window.ts[0])
    assert det.inner.window_s >= 3000.0 and span >= 0.9 * det.inner.window_s, (span, det.inner.window_s)
