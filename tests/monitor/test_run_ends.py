"""The two ends of a verl run no record shows: a log closed by its writer below
trainer.total_training_steps with no error (a silent completion: a resume at an epoch boundary exiting 0
with no new step) pages TrainingEndedEarly after 30 min; a log held open with no first step for 3 h (a
rollout server stuck creating) pages TrainingNeverStarted; a run that reaches its last step, a slow start and
a scheduler's relaunch that re-opens the log page neither."""

from __future__ import annotations

from pathlib import Path

from alerting.clock import SimulatedClock
from monitor.evaluation.rules import load_rule_files
from monitor.pipeline import Pipeline
from monitor.sources.tail_state import OffsetStore
from monitor.sources.verl_jsonl import JsonlTail, RunLiveness
from tests.monitor.test_hang import T0, _fired, _live, record

PAGES = ("P0", "P1", "P2")


def _steps(n: int, first: int = 1) -> tuple[list[bytes], list[float]]:
    lines = [record(step, 60.0) for step in range(first, first + n)]
    return lines, [T0 + 60.0 * (i + 1) for i in range(n)]


def test_a_log_closed_below_the_total_pages_a_silent_completion_and_a_full_run_does_not(tmp_path: Path) -> None:
    lines, times = _steps(40)
    (tmp_path / "a").mkdir()
    events = _live(tmp_path / "a", lines, times, total_steps=100, writer_closes=True, until=times[-1] + 2400.0)
    ended = _fired(events, "TrainingEndedEarly")
    assert ended and ended[0][1] == "firing" and times[-1] + 1800.0 <= ended[0][0] <= times[-1] + 1860.0
    assert "60 steps short" in ended[0][2]["annotations"]["summary"]

    (tmp_path / "b").mkdir()
    events = _live(tmp_path / "b", lines, times, total_steps=40, writer_closes=True, until=times[-1] + 2400.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []


class _Run:
    """A verl log written and polled on a simulated clock, its writer open or closed at will."""

    def __init__(self, tmp_path: Path, total_steps: int | None) -> None:
        self.path = tmp_path / "run.jsonl"
        self.clock = SimulatedClock(T0)
        self.events: list[tuple[float, dict]] = []
        self.pipe = Pipeline(load_rule_files(None), self.clock, on_record=lambda r: self.events.append(
            (self.clock.now(), r)) if r.get("kind") == "alert" else None)
        self.open = True
        self.fh = self.path.open("wb")
        self.tail = JsonlTail(self.path, "gpu-1", offsets=OffsetStore(tmp_path / "offsets.json"),
                              liveness=RunLiveness(total_steps, writer_open=lambda: self.open, check_every_s=0.0))

    def until(self, t: float, poll_s: float = 30.0) -> None:
        while self.clock.now() + poll_s <= t:
            now = self.clock.now() + poll_s
            self.clock.set(now)
            self.pipe.ingest(self.tail.poll(now).samples, "jsonl")
            self.pipe.tick()

    def write(self, line: bytes) -> None:
        self.fh.write(line)
        self.fh.flush()


def test_a_resume_that_exits_with_no_new_step_is_a_silent_completion(tmp_path: Path) -> None:
    run = _Run(tmp_path, total_steps=100)
    for step in range(1, 61):
        run.write(record(step, 60.0))
        run.until(T0 + 60.0 * step)
    run.fh.close()  # the trainer stops; verl resumes it and re-opens its log with "w" ...
    run.fh = run.path.open("wb")
    run.until(T0 + 3600.0 + 300.0)
    run.fh.close()  # ... and exits 0 at the epoch boundary without a new step
    run.open = False
    run.until(T0 + 3600.0 + 2700.0)
    ended = _fired(run.events, "TrainingEndedEarly")
    assert ended and "40 steps short" in ended[0][2]["annotations"]["summary"]


def test_a_relaunch_that_reopens_the_log_clears_the_silent_end_at_once(tmp_path: Path) -> None:
    """A scheduler relaunching a dead trainer 20 min later (auto-resume): the log closed 40 steps short,
    then held open again while the checkpoint loads. Polled every 5 min (a monitor of slow-step runs), a
    condition whose series merely stopped counted as held for 3 polls more: 20 + 15 min met `for: 30m`."""
    run = _Run(tmp_path, total_steps=100)
    for step in range(1, 61):
        run.write(record(step, 60.0))
        run.until(T0 + 60.0 * step, poll_s=300.0)
    run.fh.close()
    run.open = False  # the trainer died: no process holds the log
    run.until(T0 + 3600.0 + 1200.0, poll_s=300.0)
    run.fh = run.path.open("wb")  # the relaunch re-opens it with "w" and loads its checkpoint for 40 min
    run.open = True
    run.until(T0 + 3600.0 + 3600.0, poll_s=300.0)
    for step in range(51, 61):
        run.write(record(step, 60.0))
        run.until(T0 + 7200.0 + 60.0 * (step - 50), poll_s=300.0)
    assert _fired(run.events, "TrainingEndedEarly") == []


def test_a_start_with_no_first_step_for_3_h_pages_and_a_slow_start_does_not(tmp_path: Path) -> None:
    (tmp_path / "stuck").mkdir()
    stuck = _Run(tmp_path / "stuck", total_steps=100)
    stuck.until(T0 + 4 * 3600.0)
    never = _fired(stuck.events, "TrainingNeverStarted")
    assert never and T0 + 10800.0 < never[0][0] <= T0 + 10800.0 + 60.0

    (tmp_path / "slow").mkdir()
    slow = _Run(tmp_path / "slow", total_steps=100)
    slow.until(T0 + 9000.0)  # 30 min loading a large model and validating, then a first 2-h step
    for step in range(1, 4):
        slow.write(record(step, 3600.0))
        slow.until(T0 + 9000.0 + 3600.0 * step)
    assert _fired(slow.events, "TrainingNeverStarted") == []
