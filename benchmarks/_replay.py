"""Replay generated or benchmark series through the monitor's Pipeline and note when alerts fire."""

from __future__ import annotations

from alerting.clock import SimulatedClock
from monitor.evaluation.rules import Rule
from monitor.pipeline import Pipeline
from monitor.replay import feed
from monitor.sources.recorded import Recording


def replay_firing(rec: Recording, rules: list[Rule], tick_s: float = 5.0) -> list[tuple[dict[str, str], float]]:
    """(alert labels, simulated time the firing record was emitted) — what an operator experiences.

    The same feed as `monitor.replay.run_recording`; the emission time is taken here because a record's
    `startsAt` is when the condition began (Prometheus' activeAt), not when it was sent.
    """
    if len(rec) == 0:
        return []
    clock = SimulatedClock(float(rec.t[0]))
    fired: list[tuple[dict[str, str], float]] = []

    def on_record(r: dict) -> None:
        if r.get("kind") == "alert" and r.get("status") == "firing":
            fired.append((dict(r["labels"]), clock.now()))

    pipe = Pipeline(rules, clock, on_record=on_record)
    feed(pipe, rec, clock, tick_s)
    pipe.close()
    return fired
