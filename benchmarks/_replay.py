"""Replay generated or benchmark series through the monitor's Pipeline and note when alerts fire."""

from __future__ import annotations

from alerting.clock import SimulatedClock
from monitor.pipeline import Pipeline
from monitor.rules import Rule
from monitor.sources.recorded import Recording


def replay_firing(rec: Recording, rules: list[Rule], tick_s: float = 5.0) -> list[tuple[dict[str, str], float]]:
    """(alert labels, simulated time the firing record was emitted) — what an operator experiences.

    The loop of `monitor.replay.run_recording` (same Pipeline, same tick cadence), kept here because
    a record's `startsAt` is when the condition began (Prometheus' activeAt), not when it was sent.
    """
    if len(rec) == 0:
        return []
    clock = SimulatedClock(float(rec.t[0]))
    fired: list[tuple[dict[str, str], float]] = []

    def on_record(r: dict) -> None:
        if r.get("kind") == "alert" and r.get("status") == "firing":
            fired.append((dict(r["labels"]), clock.now()))

    pipe = Pipeline(rules, clock, on_record=on_record)
    handles = [pipe.series(name, labels) for name, labels in rec.series]
    next_tick = current = float(rec.t[0])
    for t, sid, v in zip(rec.t.tolist(), rec.sid.tolist(), rec.value.tolist(), strict=True):
        if t > current:
            if current >= next_tick:
                clock.set(current)
                pipe.tick()
                next_tick = current + tick_s
            current = t
        if handles[sid] is not None:
            pipe.observe(handles[sid], t, v)
    clock.set(max(current, clock.now()))
    pipe.tick()
    pipe.close()
    return fired
