"""Time you can trust: the daemon on an injected clock whose wall time steps (back an hour; forward an
hour and back) while its monotonic time runs on. Durations and ``for:`` follow the monotonic clock,
no sample is refused for being "older" than the last one, nothing goes stale, the step is counted, and
a RESOLVED never goes out for a page that was never sent."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import yaml

from alerting.clock import SimulatedClock
from harness.standin import WebhookStandIn
from monitor.config import load_config
from monitor.daemon import Daemon
from monitor.model import Sample, SourceBatch
from monitor.timeline import SteadyClock
from tests.alerting.helpers import T0, Harness, alert, make_config, receiver

RULES = {"rules": [
    {"alert": "ClockProbeHot", "severity": "P1", "for": "60s", "select": "probe_temperature",
     "detector": {"type": "threshold", "op": ">", "value": 0.5}, "summary": "hot"},
    {"alert": "ClockProbeStale", "severity": "P0", "select": "probe_step",
     "detector": {"type": "staleness", "max_gap": "10m"}, "summary": "stale"}]}


class SteppingClock:
    """Wall time that a test can step; monotonic time that only moves forward."""

    def __init__(self, start: float) -> None:
        self.mono, self.wall_offset = 1000.0, start - 1000.0

    def now(self) -> float:
        return self.wall_offset + self.mono

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.mono += max(0.0, seconds)

    def step(self, seconds: float) -> None:
        self.wall_offset += seconds


def daemon(tmp: Path, clock: SteppingClock) -> Daemon:
    (tmp / "rules.yaml").write_text(yaml.safe_dump(RULES))
    (tmp / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "rules": ["rules.yaml"],
        "cluster": "test"}))
    return Daemon(load_config(tmp / "monitor.yaml"), clock=clock)


def run(d: Daemon, clock: SteppingClock, seconds: float, hot: bool, wall_stamped: bool = False) -> None:
    """Every 5 s: a sample of each probe (stamped by the monitor, or by the stepped wall clock as a
    trainer's JSONL on the same host would be), then an evaluation."""
    for _ in range(int(seconds / 5)):
        clock.sleep(5.0)
        t = clock.now() if wall_stamped else d.clock.now()
        d.ingest(SourceBatch("probe", [Sample("probe_temperature", {"node": "n1"}, 1.0 if hot else 0.0, t),
                                       Sample("probe_step", {"node": "n1"}, 1.0, t)]))
        d.check_clock()
        d.pipeline.tick()


def firing(d: Daemon) -> list[str]:
    return [a.name for a in d.pipeline.book.firing()]


def test_a_step_back_refuses_no_sample_and_for_runs_on_monotonic_time(tmp_path: Path) -> None:
    clock = SteppingClock(T0)
    d = daemon(tmp_path, clock)
    try:
        run(d, clock, 50, hot=True)
        assert firing(d) == []  # for: 60s not yet held
        clock.step(-3600.0)
        run(d, clock, 15, hot=True)
        assert firing(d) == ["ClockProbeHot"]  # 65 s of monotonic time, whatever the wall clock did
        run(d, clock, 20, hot=True, wall_stamped=True)  # stamps an hour "in the past", re-anchored
        assert d.pipeline.rejected == {}
        assert d.metrics.clock_steps._value.get() == 1
        run(d, clock, 10, hot=False, wall_stamped=True)
        assert firing(d) == []  # it resolves on time instead of freezing firing for an hour
    finally:
        d.close()


def test_a_step_forward_and_back_makes_nothing_stale(tmp_path: Path) -> None:
    clock = SteppingClock(T0)
    d = daemon(tmp_path, clock)
    try:
        run(d, clock, 30, hot=False)
        clock.step(3600.0)
        run(d, clock, 30, hot=False)
        clock.step(-3600.0)
        run(d, clock, 30, hot=False, wall_stamped=True)
        assert firing(d) == [] and d.pipeline.book.pending() == []
        assert d.pipeline.rejected == {} and d.metrics.clock_steps._value.get() == 2
    finally:
        d.close()


def test_steady_clock_passes_a_simulated_clock_through() -> None:
    sim = SimulatedClock(T0)
    steady = SteadyClock(sim)
    sim.advance(12.5)
    assert steady.now() == sim.now() and steady.check() is None
    sim.set(T0 + 20)  # set on the simulated clock itself: the timeline follows it (no pass-through hooks)
    assert steady.now() == T0 + 20 and steady.check() is None


def test_no_resolved_message_for_a_page_that_was_never_sent(tmp_path: Path) -> None:
    clock = SimulatedClock(T0)
    robot = WebhookStandIn(clock=clock)
    h = Harness(tmp_path, make_config([receiver("webhook", robot)]), clock)
    try:
        a = alert("TrainerDown", "P0")
        h.engine.submit([a])
        clock.advance(5.0)  # cleared inside group_wait (30 s): never paged ...
        h.engine.submit([alert("TrainerDown", "P0", status="resolved")])
        assert h.engine.drain(600.0)
        assert robot.received == []  # ... so no RESOLVED either
        h.engine.submit([a])
        assert h.engine.drain(600.0)
        h.engine.submit([alert("TrainerDown", "P0", status="resolved")])
        assert h.engine.drain(600.0)
        assert [r.body["status"] for r in robot.received] == ["firing", "resolved"]
    finally:
        h.engine.close()
        robot.close()


def test_a_failing_evaluation_tick_makes_healthz_say_so(tmp_path: Path) -> None:
    d = daemon(tmp_path, SteppingClock(T0))
    try:
        assert d.health()["reasons"] == []
        real = d.pipeline.tick

        def boom() -> list:
            raise RuntimeError("detector exploded")
        d.pipeline.tick = boom  # type: ignore[method-assign]
        def one_round() -> None:  # the evaluation thread, as run() starts and stops it
            stop = threading.Event()
            evaluation = threading.Thread(target=d._eval_loop, args=(stop,), name="evaluation")
            evaluation.start()
            time.sleep(0.05)
            stop.set()
            d._fresh.set()
            evaluation.join(10.0)
            assert not evaluation.is_alive()
        one_round()
        reasons = d.health()["reasons"]
        assert reasons[0] == "evaluation: last tick failed (RuntimeError: detector exploded)"
        assert d.metrics.eval_failures._value.get() >= 1
        d.pipeline.tick = real  # type: ignore[method-assign]
        one_round()
        assert d.health()["reasons"] == []
    finally:
        d.close()
