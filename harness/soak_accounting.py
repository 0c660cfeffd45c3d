"""The soak's time accounting, pure (no processes): ETTR's productive seconds and where the rest went.

A *run* is one trainer process while it trained: step -> completion time (journal seconds). A step's time
is the gap since the previous step of the same run; a run's first step (whose gap would include start-up)
gets the run's median gap. ETTR (Meta's definition) counts a step as productive when its update survives:
steps a run completed after the checkpoint the next run resumed from are recomputed and do not count.

Seconds lost per fault:

- ``restart``: no step running: from the SIGKILL to the start of the next run's first step (process start,
  imports, model build, resume; with ``--hot-standby`` only the takeover and the resume);
- ``recomputed``: the killed run's steps after the checkpoint the next run resumed from, plus the step in
  flight at the kill: work done twice;
- ``degraded``: while the fault is active, the excess of each slow step (more than ``SLOW_FACTOR`` times the
  median healthy step time before the fault, or of the whole run when fewer than ``MIN_REFERENCE_STEPS``
  came before it) over that median. The fault is active from its injection (a
  kill: from the next run's first step) until ``HEALTHY_STREAK`` steps in a row are not slow, the next
  fault, or the end of the run. ETTR counts these steps as productive (their updates survive): degraded
  seconds are reported beside it, not subtracted from it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

SLOW_FACTOR = 1.5
HEALTHY_STREAK = 5
HEALTHY_REFERENCE_STEPS = 100  # the median healthy step time is taken over this many steps before a fault
MIN_REFERENCE_STEPS = 10  # ... or over the whole run when fewer came before it


def step_seconds(steps: dict[int, float]) -> tuple[dict[int, float], float]:
    """Per-step durations of one run (gap since the previous step, where there is one) and their median,
    which stands in for a step with no predecessor (the run's first: its gap would include start-up)."""
    times = sorted(steps.items())
    gaps = {s: t - tp for (sp, tp), (s, t) in zip(times, times[1:], strict=False) if s == sp + 1}
    return gaps, statistics.median(gaps.values()) if gaps else 0.0


def durations(steps: dict[int, float]) -> dict[int, float]:
    """Every step's time as ETTR counts it (the gap, or the run's median for a step with no predecessor)."""
    gaps, median = step_seconds(steps)
    return {s: gaps.get(s, median) for s in steps}


def first_step_start(steps: dict[int, float]) -> float | None:
    """When a run's first step began, as ETTR counts it (its completion minus the run's median step)."""
    if not steps:
        return None
    return min(steps.values()) - step_seconds(steps)[1]


def productive_seconds(runs: list[dict[int, float]], resumed_from: list[int]) -> float:
    """Seconds of training whose updates survive. ``runs[i]``: step -> completion time of run i;
    ``resumed_from[i]``: the checkpoint step run i resumed from. Steps of run i after
    ``resumed_from[i + 1]`` were recomputed by run i + 1 and do not count. Start-up and restart time
    are never productive."""
    total = 0.0
    for i, steps in enumerate(runs):
        survives = resumed_from[i + 1] if i + 1 < len(runs) else float("inf")
        total += sum(d for s, d in durations(steps).items() if s <= survives)
    return total


def kill_costs(killed: dict[int, float], killed_at: float, next_resumed_from: int,
               nxt: dict[int, float] | None, end_t: float) -> tuple[float, float]:
    """``(restart, recomputed)`` seconds of a SIGKILL at ``killed_at`` of the run ``killed``; ``nxt``:
    the run that took over (resumed from ``next_resumed_from``), None when none stepped before ``end_t``."""
    redone = sum(d for s, d in durations(killed).items() if s > next_resumed_from)
    in_flight = max(0.0, killed_at - max(killed.values())) if killed else 0.0
    start = first_step_start(nxt or {})
    restart = max(0.0, (end_t if start is None else start) - killed_at)
    return restart, redone + in_flight


@dataclass(frozen=True)
class StepSpan:
    """One step for the degraded-time measure: completion time and duration."""

    t: float
    seconds: float


def healthy_median(timeline: list[StepSpan], before: float) -> float | None:
    """Median step time of the ``HEALTHY_REFERENCE_STEPS`` steps completed before ``before``; with fewer
    than ``MIN_REFERENCE_STEPS`` of them (a fault in the first seconds of training), the median of the whole
    timeline: a run's first steps are its warm-up (slow, more so on a loaded machine), and a median of two
    of them can hide the fault's slow step; the fault's slow steps are a minority of the whole run."""
    ref = [x.seconds for x in timeline if x.t < before][-HEALTHY_REFERENCE_STEPS:]
    if len(ref) < MIN_REFERENCE_STEPS:
        ref = [x.seconds for x in timeline]
    return statistics.median(ref) if ref else None


def degraded_seconds(steps: list[StepSpan], start: float, until: float, median: float | None) -> float:
    """Excess over ``median`` of the slow steps completed in ``(start, until]`` until ``HEALTHY_STREAK``
    steps in a row are not slow (``steps`` in time order)."""
    if median is None or median <= 0:
        return 0.0
    excess, streak = 0.0, 0
    for x in steps:
        if x.t <= start:
            continue
        if x.t > until or streak >= HEALTHY_STREAK:
            break
        if x.seconds > SLOW_FACTOR * median:
            excess += x.seconds - median
            streak = 0
        else:
            streak += 1
    return excess


def spans(steps: dict[int, float]) -> list[StepSpan]:
    """A run's steps as ``StepSpan`` in time order, their duration as ETTR counts it."""
    d = durations(steps)
    return sorted((StepSpan(steps[s], d[s]) for s in steps), key=lambda x: x.t)
