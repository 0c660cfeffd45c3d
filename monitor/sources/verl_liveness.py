"""Liveness of the run behind a verl JSONL log (TrainerDown) and how long its current step has been
running (TrainingStalled's hang rule), both fed by ``JsonlTail`` (monitor/sources/verl_jsonl.py)."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable

from monitor.model import Sample, with_node
from monitor.sources.verl_gaps import COLLECTIVE_LEFT, EXPECTED_EXTRA, ExpectedGaps

JOB = "verl_jsonl"             # job label of every JSONL series (plumbing: never an alert label)
MIN_SPACING_S = 1e-3                  # least spacing between two records (keeps samples distinct)
IN_PROGRESS = "verl_step_in_progress_seconds"  # seconds since the run's last record, while it is live
IN_PROGRESS_EVERY_S = 30.0     # its spacing inside the gaps of a finished log (replay, ``in_progress``)
IN_PROGRESS_MAX_PER_GAP = 240  # and at most this many samples per gap (a days-long gap stays cheap)
# the two ends of a run no record shows: a start that never logs its first step (a rollout server stuck
# creating, holding the GPUs idle) and a log whose writer closed it below trainer.total_training_steps
# with no error (a resume at an epoch boundary that exits 0 without a new step)
WAITING_FIRST_STEP = "verl_jsonl_run_waiting_first_step_seconds"
STEPS_SHORT = "verl_jsonl_run_steps_short"


def in_progress(record_times: list[float], node: str | None,
                extras: dict[float, float] | None = None) -> list[Sample]:
    """``verl_step_in_progress_seconds`` as the live tail would have sampled it between the records of a
    finished log (``replay``): 0 at each record, then every ``IN_PROGRESS_EVERY_S`` until the next one,
    so a gap inside the log -- a step that hung for 30 min and then finished -- is judged as it ran.
    Nothing after the last record: a finished log ended there. ``extras``: per record time, the
    validation/save seconds the step after it was due (``verl_step_expected_extra_seconds``, sampled
    at the record, before the step's first in-progress sample)."""
    labels = with_node({"job": JOB}, node)
    times = sorted(set(record_times))
    out: list[Sample] = []
    for t0, t1 in zip(times, times[1:], strict=False):
        if extras is not None:
            out.append(Sample(EXPECTED_EXTRA, labels, extras.get(t0, 0.0), t0))
        out.append(Sample(IN_PROGRESS, labels, 0.0, t0))
        every = max(IN_PROGRESS_EVERY_S, (t1 - t0) / IN_PROGRESS_MAX_PER_GAP)
        k = 1
        while t0 + k * every < t1 - MIN_SPACING_S:
            out.append(Sample(IN_PROGRESS, labels, k * every, t0 + k * every))
            k += 1
    if times:
        out.append(Sample(IN_PROGRESS, labels, 0.0, times[-1]))
    return out


def running_step(out: list[Sample], labels: dict[str, str], record_times: list[float], running: float, now: float,
                 last_t: float, gaps: ExpectedGaps) -> float:
    """The live tail's ``verl_step_in_progress_seconds``: 0 where a step ended (``record_times``), then the
    running step's seconds now, after the validation/save seconds it is due (``EXPECTED_EXTRA``) and, where
    the run's config gives NCCL's timeout and its steps leave room, the seconds before that timeout
    (``COLLECTIVE_LEFT``); returns the time of the last sample (``last_t``: the one before). A line-by-line writer (verl 0.8+) wrote each
    record as its step ended, so a backlog or the history before a resumed offset tells the hang rule the
    run's step times at once; 0.6-0.7 write through an 8 KB buffer, a few steps at a time, so only the
    newest record of a poll counts there: the steps the hang rule learns are then the gaps between
    writes, which is how long the log goes quiet when healthy."""
    for t in sorted(set(record_times)):
        if last_t < t < now:
            out.append(Sample(IN_PROGRESS, labels, 0.0, t))
            last_t = t
    if now > last_t:
        extra_s = gaps.extra_s()
        out.append(Sample(EXPECTED_EXTRA, labels, extra_s, now))
        out.append(Sample(IN_PROGRESS, labels, running, now))
        left = gaps.collective_left(running, extra_s)
        if left is not None:
            out.append(Sample(COLLECTIVE_LEFT, labels, left, now))
        last_t = now
    return last_t


class RunLiveness:
    """Is the run behind a JSONL file alive, finished, or down?

    ``up`` is 1 while the file keeps growing within ``max(down_after_s, down_after_steps x step
    interval)`` (the step interval being the larger of verl's own step time and the typical gap between
    writes: 0.6-0.7 flush only every 8 KB, i.e. every few steps); after that the run is *finished* (quiet for good) when its last step reached
    ``total_steps`` or, with ``total_steps`` unknown, when no process holds the file open any more;
    otherwise it is *down* (0): stopped before its last step, or the writer is alive but stuck. A
    file already idle that long when the monitor starts, or one without a record yet, is not judged
    (``up`` is None).
    """

    def __init__(self, total_steps: int | None = None, down_after_s: float = 600.0, down_after_steps: float = 3.0,
                 writer_open: Callable[[], bool | None] | None = None, check_every_s: float = 30.0) -> None:
        self.total_steps, self.down_after_s, self.down_after_steps = total_steps, down_after_s, down_after_steps
        self.writer_open = writer_open or (lambda: None)
        self.check_every_s = check_every_s
        self.state = "waiting"         # waiting | live | finished | down | idle_at_start
        self.last_arrival = -math.inf
        self.last_step: float | None = None
        self._intervals: deque[float] = deque(maxlen=16)
        self._write_gaps: deque[float] = deque(maxlen=16)
        self._checked_at = -math.inf
        self._writer: bool | None = None
        self.opened_at: float | None = None   # this run's log seen with no record yet (created or re-opened)
        # validation/checkpoint seconds the running step is due (set by the tail, monitor/sources/verl_gaps.py):
        # a 20-min validation in a 10-min-step run is a 30-min quiet log, not a run that stopped
        self.expected_extra_s = 0.0
        self.resumed_from: float | None = None  # the last step before verl re-opened the log (a restart)

    def window(self) -> float:
        step = statistics.median(self._intervals) if self._intervals else 0.0
        writes = statistics.median(self._write_gaps) if self._write_gaps else 0.0
        return max(self.down_after_s, self.down_after_steps * max(step, writes)) + self.expected_extra_s

    def observe(self, arrival: float, step: float | None, intervals: list[float]) -> None:
        """Records arrived (``arrival``: now, or the file's mtime for what was there before we looked)."""
        self._intervals.extend(intervals)
        if step is not None:
            self.last_step = step
        elif self.last_step is None and self.opened_at is None:
            self.opened_at = arrival
        if self.state != "waiting" and math.isfinite(self.last_arrival) and arrival > self.last_arrival:
            self._write_gaps.append(arrival - self.last_arrival)
        self.last_arrival = max(self.last_arrival, arrival)
        if self.state != "waiting" and arrival >= self.last_arrival:
            self.state = "live"  # new records after a finish or an outage: a (re)started run

    def running(self, now: float, last_record: float) -> float | None:
        """Seconds the current step has been running (since the record at ``last_record``) while the run
        is live; None before its first record, once it finished, or when no process holds the file any
        more (verl's FileLogger.finish at a normal end, or a trainer that died: TrainerDown's case, not a
        hang)."""
        if self.state in ("waiting", "idle_at_start", "finished") or self.last_step is None \
                or not math.isfinite(last_record):
            return None
        if self.total_steps is not None and self.last_step >= self.total_steps:
            return None
        elapsed = max(0.0, now - last_record)
        if elapsed > self.down_after_s / 4.0:  # a closed file: finished, or the trainer died (TrainerDown's)
            if now - self._checked_at >= self.check_every_s:
                self._checked_at = now
                self._writer = self.writer_open()
            if self._writer is False:
                return None
        return elapsed

    def restarted(self) -> None:
        """The log was truncated (verl opens it with "w": a resumed run): like a new run, nothing is judged
        before its first record -- a resumed trainer loading its model and checkpoint is not hung."""
        if self.last_step is not None:
            self.resumed_from = self.last_step
        self.last_step, self.opened_at = None, None

    def _writer_now(self, now: float) -> bool | None:
        if now - self._checked_at >= self.check_every_s:
            self._checked_at = now
            self._writer = self.writer_open()
        return self._writer

    def waiting_first_step(self, now: float) -> float | None:
        """Seconds this run's log has been open without its first record while its writer holds it (None:
        it has a record, its writer closed it, or nobody can tell)."""
        if self.last_step is not None or self.opened_at is None or self._writer_now(now) is not True:
            return None
        return max(0.0, now - self.opened_at)

    def end_samples(self, now: float, labels: dict[str, str]) -> list[Sample]:
        """The run's silent ends, as far as they hold now (``WAITING_FIRST_STEP``, ``STEPS_SHORT``)."""
        values = ((WAITING_FIRST_STEP, self.waiting_first_step(now)), (STEPS_SHORT, self.steps_short(now)))
        return [Sample(name, labels, value, now) for name, value in values if value is not None]

    def steps_short(self, now: float) -> float | None:
        """Steps below ``total_steps`` at which the writer closed the log; 0 while a writer holds it open
        or once the run reached the total (None: unknown total, no step yet, or nobody can tell). After a
        restart with no new record: the step before it. The 0 matters: a relaunch re-opening the log must
        clear the condition at once -- a series that merely stops counts as held for its freshness horizon
        (3 of its intervals), so a 20-min relaunch gap polled every 5 min met TrainingEndedEarly's 30 min."""
        last = self.last_step if self.last_step is not None else self.resumed_from
        if self.total_steps is None or last is None:
            return None
        if last >= self.total_steps:
            return 0.0
        writer = self._writer_now(now)
        if writer is None:
            return None
        return 0.0 if writer else float(self.total_steps - last)

    def up(self, now: float) -> float | None:
        if self.state == "waiting" and math.isfinite(self.last_arrival):
            self.state = "idle_at_start" if now - self.last_arrival > self.window() else "live"
        if self.state in ("waiting", "idle_at_start") or self.last_step is None:
            return None  # nothing to judge before the first record (model loading, compilation, 8 KB buffer)
        if self.state == "finished":
            return 1.0
        if self.total_steps is not None and self.last_step is not None and self.last_step >= self.total_steps:
            self.state = "finished"
            return 1.0
        if now - self.last_arrival <= self.window():
            self.state = "live"
            return 1.0
        if now - self._checked_at >= self.check_every_s:
            self._checked_at = now
            self._writer = self.writer_open()
        if self.total_steps is None and self._writer is False:
            self.state = "finished"  # the writer closed the file (verl's FileLogger.finish)
            return 1.0
        self.state = "down"
        return 0.0
