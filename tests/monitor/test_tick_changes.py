"""The tick tells the alert book only what changed; every page, pending state, resolve and value must come
out as when every active instance is told again at every tick (how the evaluator worked before)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from alerting.clock import SimulatedClock
from monitor.book.alerts import AlertBook
from monitor.evaluation.evaluator import Evaluator
from monitor.evaluation.instances import Evaluation
from monitor.evaluation.rules import load_rules
from monitor.model import Sample
from monitor.pipeline import Pipeline

T0 = 1_700_000_000.0
RULES = """
rules:
  # two families for one GPU: one fingerprint, the alert active while either holds
  - alert: HotGPU
    severity: P1
    for: 20s
    keep_firing_for: 15s
    select: [gpu_temp, DCGM_FI_DEV_GPU_TEMP]
    detector: {type: threshold, op: ">", value: 80}
    summary: "hot {{ value }}"
    runbook: "cool it"
  - alert: ErrorsRising
    severity: P2
    select: errors_total
    detector: {type: counter_increase, window: 30s, min_increase: 1}
    summary: "errors"
    runbook: "look"
  # a join: the instance holds only while its node's partner condition is fresh and active
  - alert: SlowAndHot
    severity: P2
    for: 10s
    select: step_seconds
    detector: {type: threshold, op: ">", value: 5}
    when:
      - select: gpu_temp
        detector: {type: threshold, op: ">", value: 70}
    summary: "slow"
    runbook: "look"
"""


def _run(tmp_path: Path, seed: int, every_tick: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    if every_tick:  # the old way: every given instance looked at and told again at every tick
        monkeypatch.setattr(Evaluator, "_calm_until", lambda self, b, ready: float("-inf"))
        told = Evaluator.tick

        def tick_all(self: Evaluator, now: float) -> Evaluation:
            self._changed |= set(self._given)
            return told(self, now)
        monkeypatch.setattr(Evaluator, "tick", tick_all)
        # ... and the book looks at every state that nothing holds, not only at those that changed or were loose
        monkeypatch.setattr(AlertBook, "_unheld", lambda self, by_fp, held, changed: [
            fp for fp in self.states if fp not in by_fp and fp not in held])
    (tmp_path / "rules.yaml").write_text(RULES)
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rules(tmp_path / "rules.yaml"), clock, db_path=tmp_path / f"state-{every_tick}.db")
    rng = random.Random(seed)
    temps = {(n, g): 60.0 for n in range(3) for g in range(2)}
    errors = {n: 0.0 for n in range(3)}
    out = []
    for r in range(600):
        now = T0 + 5.0 * r
        clock.set(now)
        samples = []
        for (n, g), v in temps.items():
            v = min(95.0, max(50.0, v + rng.uniform(-6, 6)))
            temps[(n, g)] = v
            labels = {"node": f"n{n}", "gpu": str(g), "job": "dcgm"}
            # a family goes silent for a while (stale), the other keeps speaking for the same GPU
            if not (n == 1 and 150 <= r < 230):
                samples.append(Sample("gpu_temp", labels, v, now))
            if rng.random() < 0.9:
                samples.append(Sample("DCGM_FI_DEV_GPU_TEMP", labels, v + rng.uniform(-3, 3), now))
        for n in errors:
            errors[n] += 1.0 if rng.random() < 0.05 else 0.0
            samples.append(Sample("errors_total", {"node": f"n{n}", "job": "verl"}, errors[n], now))
            if rng.random() < 0.8:
                samples.append(Sample("step_seconds", {"node": f"n{n}", "job": "verl"}, rng.uniform(2, 9), now))
        pipe.ingest(samples, "test", now)
        transitions = pipe.tick()
        out.append([(a.name, a.labels.get("node"), a.labels.get("gpu"), a.status, a.starts_at, a.ends_at, a.value)
                    for a in transitions])
        out.append(sorted((a.fingerprint, a.starts_at, a.value) for a in pipe.book.firing()))
        out.append(sorted(a.fingerprint for a in pipe.book.pending()))
        # the loose timers are exactly the firing states nothing holds (no alert here comes from Prometheus)
        assert set(pipe.book._loose._due) == {fp for fp, st in pipe.book.states.items()
                                              if st.status == "firing" and not st.own_active}
        # the firing gauge's counts, kept as states change, are the firing states counted afresh
        assert pipe.book.firing_counts() == Counter((a.labels["alertname"], a.labels["severity"])
                                                    for a in pipe.book.firing())
    pipe.close()
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_telling_only_changes_pages_as_telling_everything_every_tick(tmp_path: Path, seed: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    changes = _run(tmp_path, seed, False, monkeypatch)
    with monkeypatch.context() as m:
        everything = _run(tmp_path, seed, True, m)
    assert changes == everything
    transitions = [t for ticks in changes[::3] for t in ticks]
    # the run is not idle: all three rules page and resolve, the two-family GPU alert among them
    for name in ("HotGPU", "ErrorsRising", "SlowAndHot"):
        assert any(t[0] == name and t[3] == "firing" for t in transitions), name
        assert any(t[0] == name and t[3] == "resolved" for t in transitions), name


def test_a_quiet_firing_alert_is_not_looked_at_again(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rules(tmp_path / "rules.yaml"), clock)
    for r in range(40):
        now = T0 + 5.0 * r
        clock.set(now)
        pipe.ingest([Sample("gpu_temp", {"node": "n0", "gpu": "0", "job": "dcgm"}, 90.0 + r, now)], "test", now)
        evaluation = pipe.evaluator.tick(now)
        pipe.book.update(now, evaluation)
        if r == 10:
            (fp,) = evaluation.held
        if r > 10:
            assert evaluation.candidates == []  # firing since r = 4 (for: 20 s), and nothing changed
    (alert,) = pipe.book.firing()
    assert alert.fingerprint == fp and alert.value == 90.0 + 39  # the value is read when asked
    pipe.close()


def test_a_resolve_carries_the_last_value_that_held_and_the_binding_lets_it_go(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rules(tmp_path / "rules.yaml"), clock)
    labels = {"node": "n0", "gpu": "0", "job": "dcgm"}
    transitions = []
    for r, v in enumerate([90.0] * 8 + [93.0, 50.0] + [50.0] * 8):
        now = T0 + 5.0 * r
        clock.set(now)
        pipe.ingest([Sample("gpu_temp", labels, v, now)], "test", now)
        transitions += pipe.tick()
    assert [(a.status, a.value) for a in transitions] == [("firing", 90.0), ("resolved", 93.0)]
    (b,) = [b for s in pipe.store for b in s.bound or () if b.cond == 0]
    assert b.parting is None and b.said is None and b.finding is None  # nothing held past the resolve
    pipe.close()
