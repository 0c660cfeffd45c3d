"""Deadline-bound reward calls: a caller waits at most multiplier x p95 of the recent ok latency, a miss is
served from the cache at once, and the call in flight is still judged against timeout_s (simulated clock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import torch
from prometheus_client import CollectorRegistry, Counter, Gauge

from verl.fault import CircuitState, RewardCircuitBreaker
from verl.fault.circuit_breaker import MIN_LATENCY_SAMPLES
from verl.utils.clock import SimulatedClock

PROMPTS = [f"question {i}: what is {i} plus {i}?" for i in range(5)]


class SlowModel:
    """Scores len(text)/100. Each call advances the simulated clock by ``latency`` (its duration), then,
    while ``hold`` is set, blocks until ``release`` -- a hang or a slow answer, as the test decides."""

    def __init__(self, clock: SimulatedClock, latency: float = 0.01) -> None:
        self.clock, self.latency = clock, latency
        self.hold = threading.Event()
        self.release = threading.Event()
        self.raise_exc: BaseException | None = None
        self.entered = 0

    def score(self, texts: list[str]) -> list[float]:
        self.entered += 1
        self.clock.advance(self.latency)
        if self.hold.is_set():
            self.release.wait(timeout=30)
        if self.raise_exc is not None:
            raise self.raise_exc
        return [len(t) / 100 for t in texts]


def outcome(counter: Counter, name: str) -> float:
    return counter.labels(outcome=name)._value.get()


def wait_until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.002)
    assert cond()


def build(clock: SimulatedClock, model: SlowModel, **kw: float) -> tuple[RewardCircuitBreaker, Counter, Gauge]:
    reg = CollectorRegistry()
    gauge = Gauge("verl_reward_model_circuit_state", "", registry=reg)
    calls = Counter("verl_reward_model_calls", "", ["outcome"], registry=reg)
    args = {"timeout_s": 1.0, "probe_interval_s": 60.0, "deadline_multiplier": 4.0, "deadline_floor_s": 0.1, **kw}
    return RewardCircuitBreaker(model, clock=clock, state_gauge=gauge, calls_counter=calls, **args), calls, gauge


def warm(breaker: RewardCircuitBreaker, n: int = MIN_LATENCY_SAMPLES) -> None:
    for i in range(n):
        assert breaker.score([PROMPTS[i % 5]]) == [len(PROMPTS[i % 5]) / 100]


def test_deadline_is_multiplier_times_p95_between_floor_and_timeout() -> None:
    clock = SimulatedClock(1000.0)
    model = SlowModel(clock, latency=0.05)
    breaker, _, _ = build(clock, model)
    try:
        for _ in range(MIN_LATENCY_SAMPLES - 1):
            breaker.score(PROMPTS[:1])
        assert breaker.deadline_s() == 1.0  # too few ok calls: the timeout itself
        breaker.score(PROMPTS[:1])
        assert breaker.deadline_s() == pytest.approx(0.2)  # 4 x p95 of 0.05 s
        model.latency = 0.001
        for _ in range(100):
            breaker.score(PROMPTS[:1])
        assert breaker.deadline_s() == pytest.approx(0.1)  # the floor (the window holds only the fast calls now)
        model.latency = 0.6
        for _ in range(10):  # 0.6 simulated s per call (late for the 0.1 s deadline, within the 1 s timeout)
            breaker.score(PROMPTS[:1])
            wait_until(lambda: breaker._pending is None or breaker._pending.done.is_set())
        breaker.score(PROMPTS[:1])
        assert breaker.deadline_s() == 1.0  # 4 x 0.6 s, capped by the timeout: a slower model is waited for
    finally:
        breaker.close()
    with pytest.raises(ValueError, match="reward.deadline_multiplier"):
        RewardCircuitBreaker(model, deadline_multiplier=-1.0)


def test_hang_costs_one_deadline_then_timeouts_open_the_circuit() -> None:
    clock = SimulatedClock(1000.0)
    model = SlowModel(clock)
    breaker, calls, gauge = build(clock, model)
    try:
        warm(breaker)
        model.hold.set()
        model.latency = 0.2  # past the 0.1 s deadline: the caller stops waiting there
        served = [breaker.score([PROMPTS[0] + " (again)"])]
        assert served == [[len(PROMPTS[0]) / 100]] and outcome(calls, "cached") == 1
        assert outcome(calls, "timeout") == 0 and breaker.state is CircuitState.CLOSED  # a miss is no failure
        entered = model.entered
        served += [breaker.score([PROMPTS[1]]) for _ in range(3)]  # call in flight: cache, no new call
        assert model.entered == entered and outcome(calls, "cached") == 4
        model.latency = 0.0
        for timeouts in (1, 2, 3):
            clock.advance(1.0)  # the call in flight reaches reward.timeout_s
            served.append(breaker.score([PROMPTS[2]]))
            assert outcome(calls, "timeout") == timeouts
            if timeouts < 3:  # a fresh call went out, and the step did not wait for it
                wait_until(lambda n=entered + timeouts: model.entered == n)
        assert breaker.state is CircuitState.OPEN and gauge._value.get() == 2
        assert model.entered == entered + 2  # 3 calls in all, as when every caller waited out the timeout
        assert outcome(calls, "cached") == 7 and outcome(calls, "ok") == MIN_LATENCY_SAMPLES
        assert [s[0] for s in served] == [len(PROMPTS[i]) / 100 for i in (0, 1, 1, 1, 2, 2, 2)]
    finally:
        model.release.set()
        breaker.close()


def test_a_late_answer_is_ok_cached_and_the_next_call_waits_again() -> None:
    clock = SimulatedClock(1000.0)
    model = SlowModel(clock)
    breaker, calls, _ = build(clock, model)
    try:
        warm(breaker)
        model.hold.set()
        model.latency = 0.5  # jitter: slower than the deadline, well within the timeout
        late = "a prompt never seen before, answered late"
        assert breaker.score([late]) != [len(late) / 100]  # nearest cached prompt
        model.hold.clear()
        model.release.set()
        wait_until(lambda: breaker._pending is not None and breaker._pending.done.is_set())
        model.latency = 0.01
        assert breaker.score(PROMPTS[:2]) == [len(p) / 100 for p in PROMPTS[:2]]  # waited, fresh scores
        assert outcome(calls, "ok") == MIN_LATENCY_SAMPLES + 2 and outcome(calls, "timeout") == 0
        assert breaker.state is CircuitState.CLOSED
        assert breaker.cache.lookup([late], fallback=-1.0) == [len(late) / 100]  # the late answer was cached
    finally:
        model.release.set()
        breaker.close()


def test_a_late_oom_is_a_failure_and_a_good_probe_restores_the_deadline() -> None:
    clock = SimulatedClock(1000.0)
    model = SlowModel(clock)
    breaker, calls, _ = build(clock, model, failure_threshold=1, probe_interval_s=5.0)
    try:
        warm(breaker)
        model.hold.set()
        model.latency = 0.3
        model.raise_exc = torch.OutOfMemoryError("CUDA out of memory (late)")
        breaker.score(PROMPTS[:1])
        model.release.set()
        wait_until(lambda: breaker._pending is not None and breaker._pending.done.is_set())
        breaker.score(PROMPTS[:1])  # settles the late OOM: one failure opens this circuit
        assert outcome(calls, "oom") == 1 and breaker.state is CircuitState.OPEN
        model.hold.clear()
        model.raise_exc = None
        model.latency = 0.01
        clock.advance(5.0)
        wait_until(lambda: breaker.state is CircuitState.CLOSED)
        assert breaker.deadline_s() == pytest.approx(0.1)  # the healthy history survives the outage
        assert breaker.score(PROMPTS[:1]) == [len(PROMPTS[0]) / 100]
    finally:
        model.release.set()
        breaker.close()
