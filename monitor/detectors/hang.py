"""Hangs: a training step running far past the run's own step time."""

from __future__ import annotations

import statistics
from collections import deque

from monitor.detectors.base import Detector, Finding
from monitor.detectors.work import WorkLog

_NEW_STEP_S = 1e-3  # a step's start moving by more than this is a new step (records are >= 1 ms apart)


class StepOverrunDetector(Detector):
    """The series is the seconds the current step has been running (``verl_step_in_progress_seconds``:
    the time since the run's last record, sampled by the verl log tail at every poll and, in ``replay``,
    inside every gap of a finished log -- monitor/sources/verl_jsonl.py). Each sample says when the
    running step began (``t - value``); a later beginning is a finished step, and the time between two
    beginnings is one step as the log saw it (with what runs outside verl's step timer: validation, and
    the 8 KB buffer of verl 0.6-0.7 that writes several steps at once).

    Active while the running step is past ``max(min_s, ratio x the median of the last ``history``
    steps, or of the last ``recent`` when larger)``, once ``min_steps`` steps have been seen (the first
    steps compile and warm up: a run that never logged is TrainerDown's case). ``min_s`` keeps fast runs
    from paging on a slow checkpoint or validation. Judged in the run's own steps, so the same rule holds
    at 10 s and at 1 h per step.

    ``value: timestamp``: the series is instead the Unix time the loop last made progress (our trainer's
    ``verl_heartbeat_timestamp_seconds``, set when a step ends); the running step began then, and a value
    <= 0 ("never yet", as exporters initialise it) counts from the first sample seen. ``before_steps_s``:
    the bound while fewer than ``min_steps`` steps are known (0: not judged) -- the heartbeat rule's fixed
    5 min, which a trainer stuck in its first step must still get.

    ``work`` (a rule's ``explain_by: verl_step_expected_extra_seconds``): the newest value of that series
    is added to the bound -- the validation/checkpoint seconds the running step is due by the run's own
    history (monitor/sources/verl_gaps.py), so a step that validates is judged against the run's
    validation time and a training step against its training steps.

    Tested by tests/monitor/test_hang.py and tests/monitor/test_expected_gaps.py.
    """

    def __init__(self, ratio: float = 3.0, min_s: float = 300.0, history: int = 32, min_steps: int = 5,
                 value: str = "elapsed", before_steps_s: float = 0.0, recent: int = 5,
                 work: WorkLog | None = None) -> None:
        if ratio <= 1.0:
            raise ValueError(f"ratio must be > 1 (a multiple of the median step), got {ratio}")
        if value not in ("elapsed", "timestamp"):
            raise ValueError(f"value must be 'elapsed' or 'timestamp', got {value!r}")
        self.ratio, self.min_s, self.history, self.min_steps = ratio, min_s, history, min_steps
        self.timestamp, self.before_steps_s, self.recent = value == "timestamp", before_steps_s, max(1, recent)
        self.work = work
        self.reset()

    def reset(self) -> None:
        self._steps: deque[float] = deque(maxlen=self.history)
        self._start: float | None = None
        self._first: float | None = None

    def update(self, t: float, value: float) -> Finding:
        if self._first is None:
            self._first = t
        if self.timestamp:
            start = value if value > 0 else self._first
            elapsed = t - start
        else:
            start, elapsed = t - value, value
        if self._start is None or start > self._start + _NEW_STEP_S:
            if self._start is not None:
                self._steps.append(start - self._start)
            self._start = start
        details = {"value": elapsed, "elapsed_s": elapsed, "started_at": start}
        if len(self._steps) < self.min_steps:
            if self.before_steps_s <= 0:
                return Finding(t, False, 0.0, details)
            hit = elapsed > self.before_steps_s
            return Finding(t, hit, min(1.0, elapsed / self.before_steps_s), {**details, "threshold_s": self.before_steps_s})
        # the median of the last `recent` steps too, when larger: a run whose steps just doubled (longer
        # responses, a slower node) is judged by its new pace within a few steps, not by 32 old ones
        median = max(statistics.median(self._steps), statistics.median(list(self._steps)[-self.recent:]))
        extra = max(0.0, self.work.last_value) if self.work is not None else 0.0
        threshold = max(self.min_s, self.ratio * median) + extra
        return Finding(t, elapsed > threshold, min(1.0, elapsed / threshold),
                       {**details, "median_s": median, "threshold_s": threshold, "expected_extra_s": extra,
                        "ratio": elapsed / median if median > 0 else float("inf")})
