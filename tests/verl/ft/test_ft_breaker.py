"""Reward-model circuit breaker: trips on consecutive failures, serves cached scores, probes, closes."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from prometheus_client import CollectorRegistry, Counter, Gauge

from verl.fault import CircuitState, RewardCircuitBreaker, ScoreCache
from verl.utils.clock import SimulatedClock


class FlakyModel:
    """Scores len(text)/100; hangs (until released) or raises while told to."""

    def __init__(self, clock: SimulatedClock | None = None, advance_on_hang: float = 0.0) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()
        self.raise_exc: BaseException | None = None
        self.calls = 0
        self.clock, self.advance_on_hang = clock, advance_on_hang

    def score(self, texts: list[str]) -> list[float]:
        self.calls += 1
        if self.raise_exc is not None:
            raise self.raise_exc
        if self.hang.is_set():
            if self.clock is not None:
                self.clock.advance(self.advance_on_hang)
            self.release.wait(timeout=30)
        return [len(t) / 100 for t in texts]


def metrics() -> tuple[Gauge, Counter]:
    reg = CollectorRegistry()
    return (
        Gauge("verl_reward_model_circuit_state", "", registry=reg),
        Counter("verl_reward_model_calls", "", ["outcome"], registry=reg),
    )


def outcome(counter: Counter, name: str) -> float:
    return counter.labels(outcome=name)._value.get()


PROMPTS = [f"question {i}: what is {i} plus {i}?" for i in range(5)]


def test_hang_opens_serves_cache_probes_and_closes_within_bound() -> None:
    timeout, probe = 0.5, 1.0
    model = FlakyModel()
    gauge, calls = metrics()
    breaker = RewardCircuitBreaker(model, timeout_s=timeout, probe_interval_s=probe, state_gauge=gauge, calls_counter=calls)
    try:
        warm = breaker.score(PROMPTS)
        assert warm == [len(p) / 100 for p in PROMPTS] and outcome(calls, "ok") == 1
        model.hang.set()  # the reward model hangs from this step on
        t0 = time.perf_counter()
        served = [breaker.score([PROMPTS[i % 5] + " (again)"]) for i in range(10)]
        extra = time.perf_counter() - t0
        assert extra <= 3 * timeout + probe  # the contract's bound on the wall time a hang may cost
        assert outcome(calls, "timeout") >= 3 and breaker.state is not CircuitState.CLOSED
        assert gauge._value.get() in (1, 2) and outcome(calls, "cached") == 10
        # cached scores come from the most similar prompt seen while healthy
        assert [s[0] for s in served] == [len(PROMPTS[i % 5]) / 100 for i in range(10)]

        model.hang.clear()
        model.release.set()  # the model recovers; the background probe must notice
        deadline = time.monotonic() + 10
        while breaker.state is not CircuitState.CLOSED and time.monotonic() < deadline:
            time.sleep(0.02)
        assert breaker.state is CircuitState.CLOSED and gauge._value.get() == 0
        states = [s for _, s in breaker.transitions]
        assert states[:2] == [CircuitState.CLOSED, CircuitState.OPEN]
        assert CircuitState.HALF_OPEN in states and states[-1] is CircuitState.CLOSED
        ok_before = outcome(calls, "ok")
        assert breaker.score(["fresh text"]) == [0.1] and outcome(calls, "ok") == ok_before + 1
    finally:
        model.release.set()
        breaker.close()


def test_simulated_clock_drives_timeouts_and_probes() -> None:
    clock = SimulatedClock(1000.0)
    model = FlakyModel(clock=clock, advance_on_hang=31.0)
    breaker = RewardCircuitBreaker(model, clock=clock)  # the defaults: 30 s timeout, 3 failures, 5 s probe
    try:
        breaker.score(PROMPTS)
        model.hang.set()
        for _ in range(3):
            breaker.score(PROMPTS[:1])
        assert breaker.state is CircuitState.OPEN
        model.hang.clear()
        model.release.set()
        calls = model.calls
        time.sleep(0.3)
        assert breaker.state is CircuitState.OPEN and model.calls == calls  # no probe before 5 simulated s
        clock.advance(5.0)
        deadline = time.monotonic() + 10
        while breaker.state is not CircuitState.CLOSED and time.monotonic() < deadline:
            time.sleep(0.02)
        assert breaker.state is CircuitState.CLOSED
    finally:
        model.release.set()
        breaker.close()


def test_errors_and_oom_count_only_when_consecutive() -> None:
    model = FlakyModel()
    gauge, calls = metrics()
    breaker = RewardCircuitBreaker(model, timeout_s=5, probe_interval_s=60, state_gauge=gauge, calls_counter=calls)
    try:
        breaker.score(PROMPTS)
        model.raise_exc = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        breaker.score(PROMPTS[:1])
        model.raise_exc = ValueError("bad input")
        breaker.score(PROMPTS[:1])
        model.raise_exc = None
        breaker.score(PROMPTS[:1])  # a success resets the streak
        model.raise_exc = RuntimeError("HIP out of memory")
        breaker.score(PROMPTS[:1])
        breaker.score(PROMPTS[:1])
        assert breaker.state is CircuitState.CLOSED
        breaker.score(PROMPTS[:1])
        assert breaker.state is CircuitState.OPEN and gauge._value.get() == 2
        assert outcome(calls, "oom") == 4 and outcome(calls, "error") == 1
    finally:
        breaker.close()


def test_score_cache_nearest_bounded_and_state_roundtrip() -> None:
    cache = ScoreCache(size=3)
    cache.add(["the cat sat on the mat", "quantum field theory lecture", "recipe for apple pie", "nan one"],
              [1.0, 2.0, 3.0, float("nan")])
    assert len(cache) == 3
    assert cache.lookup(["the cat sat on a mat", "a recipe for apple pies"], fallback=-1) == [1.0, 3.0]
    cache.add(["stock market report"], [4.0])  # evicts the oldest
    assert cache.lookup(["the cat sat on the mat"], fallback=-1) != [1.0]
    clone = ScoreCache(size=3)
    clone.load_state_dict(cache.state_dict())
    assert clone.state_dict() == cache.state_dict()
    assert clone.lookup(["stock market report today"], fallback=-1) == [4.0]
    assert ScoreCache(size=2).lookup(["anything"], fallback=-1.0) == [-1.0]
    with pytest.raises(ValueError, match="reward.cache_size"):
        ScoreCache(size=0)
