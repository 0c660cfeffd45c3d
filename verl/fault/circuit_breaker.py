"""Reward-model circuit breaker: a hanging or failing reward model must not stall PPO.

    CLOSED --(failure_threshold consecutive timeouts/errors/OOMs)--> OPEN
    OPEN   --(background probe, every probe_interval_s)----------> HALF_OPEN
    HALF_OPEN --(probe succeeds)--> CLOSED      HALF_OPEN --(probe fails)--> OPEN

While not CLOSED, scores come from a cache of the last ``cache_size`` (prompt, reward) pairs, by the
most similar cached prompt (MinHash Jaccard estimate). Model calls run on a daemon thread that is
abandoned on timeout: a hung CUDA kernel or HTTP call cannot be interrupted from Python, only left
behind.

Two ways to wait for a CLOSED-circuit call:

- ``deadline_multiplier == 0`` (the constructor's default): each call holds its caller up to
  ``timeout_s``, so a hang costs ``failure_threshold × timeout_s`` of wall time before the circuit opens.
- ``deadline_multiplier > 0`` (the trainer's default, ``reward.deadline_multiplier``): the *caller* waits at
  most a deadline, ``multiplier × p95`` of the last ok calls' latency, at least ``deadline_floor_s`` and at
  most ``timeout_s`` (``timeout_s`` itself until ``MIN_LATENCY_SAMPLES`` ok calls were seen). On a miss the
  caller gets cached scores at once and the call stays in flight: the *call* is still judged against
  ``timeout_s`` — a late answer is an ``ok`` (its scores go to the cache, its latency to the p95), one past
  ``timeout_s`` is a ``timeout`` and a failure — and while it is in flight further callers get cached scores
  without calling. After a timeout the next call is sent with no wait (the model just hung; its answer,
  if any, is picked up by a later caller). So timeouts, the circuit's opening (after ``failure_threshold`` of
  them, ~``failure_threshold × timeout_s`` after the hang began) and the probe are as in the first mode,
  but a hang costs the caller one deadline of wall time, not ``failure_threshold × timeout_s``. A
  deadline miss alone is not a failure: scheduling jitter on a healthy model must neither page
  (RewardModelTimeout counts timeouts) nor open the circuit; it only serves that caller from the cache.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any

import numpy as np
import torch

from verl.models.reward import RewardModel
from verl.utils.clock import Clock, SystemClock

from .similarity import NUM_PERM, signatures

log = logging.getLogger(__name__)

MIN_LATENCY_SAMPLES = 5
"""Ok calls seen before the deadline is derived from their latency (the first calls wait ``timeout_s``)."""
LATENCY_WINDOW = 100
"""Ok calls whose latency the p95 is taken over."""


class CircuitState(IntEnum):
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


class _Caller:
    """Runs model calls on a reused daemon thread. A call that hangs cannot be interrupted from Python,
    so on timeout its thread is abandoned (it exits if the call ever returns) and the next call gets
    a fresh one. Reusing the thread matters: ``Thread.start`` waits until the new thread is scheduled,
    which costs tens of milliseconds per call on a busy host."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: tuple[threading.Thread, queue.SimpleQueue[Callable[[], None] | None]] | None = None

    def submit(self, job: Callable[[], None]) -> threading.Thread:
        with self._lock:
            if self._current is None:
                jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
                thread = threading.Thread(target=self._loop, args=(jobs,), name="reward-call", daemon=True)
                thread.start()
                self._current = (thread, jobs)
            thread, jobs = self._current
        jobs.put(job)
        return thread

    def abandon(self, thread: threading.Thread) -> None:
        with self._lock:
            if self._current is not None and self._current[0] is thread:
                self._current[1].put(None)  # read by the hung thread only if it ever returns
                self._current = None

    def abandon_all(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current[1].put(None)
                self._current = None

    @staticmethod
    def _loop(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := jobs.get()) is not None:
            job()


class _Call:
    """One model call: started on the injected clock; the worker thread fills in the rest."""

    def __init__(self, keys: list[str], size: int, started: float) -> None:
        self.keys, self.size, self.started = keys, size, started
        self.done = threading.Event()
        self.value: list[float] | None = None
        self.error: BaseException | None = None
        self.finished = started
        self.thread: threading.Thread | None = None


class ScoreCache:
    """Ring buffer of the last ``size`` (prompt, reward) pairs with a nearest-prompt lookup.

    Signatures are kept as one NumPy matrix so a lookup is a single vectorised comparison over the
    whole cache instead of ``size`` Python-level Jaccard calls."""

    def __init__(self, size: int = 1000, num_perm: int = NUM_PERM) -> None:
        if size < 1:
            raise ValueError(f"reward.cache_size must be >= 1, got {size}")
        self.size, self.num_perm = size, num_perm
        self._sig = np.zeros((size, num_perm), dtype=np.uint64)
        self._prompts: list[str] = [""] * size
        self._rewards = np.zeros(size, dtype=np.float64)
        self._next = 0
        self._count = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def add(self, prompts: Sequence[str], rewards: Sequence[float]) -> None:
        sig = signatures(list(prompts), self.num_perm)
        with self._lock:
            for i, (p, r) in enumerate(zip(prompts, rewards, strict=True)):
                if not np.isfinite(r):
                    continue  # a NaN reward is exactly what we must never replay
                self._sig[self._next], self._prompts[self._next], self._rewards[self._next] = sig[i], p, float(r)
                self._next = (self._next + 1) % self.size
                self._count = min(self._count + 1, self.size)

    def lookup(self, prompts: Sequence[str], fallback: float) -> list[float]:
        """Reward of the most similar cached prompt; the cache mean when nothing is similar at all;
        ``fallback`` when the cache is empty."""
        sig = signatures(list(prompts), self.num_perm)
        with self._lock:
            n = self._count
            if n == 0:
                return [fallback] * len(prompts)
            cached, rewards = self._sig[:n], self._rewards[:n]
            out = []
            for row in sig:
                sim = (cached == row).mean(axis=1)
                best = int(sim.argmax())
                out.append(float(rewards[best]) if sim[best] > 0 else float(rewards.mean()))
            return out

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            order = [(self._next - self._count + i) % self.size for i in range(self._count)]
            return {"prompts": [self._prompts[i] for i in order], "rewards": [float(self._rewards[i]) for i in order]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._next = self._count = 0
        self.add(state["prompts"][-self.size :], state["rewards"][-self.size :])


class RewardCircuitBreaker:
    """Wraps any ``.score(texts) -> list[float]`` model; itself has ``.score``, so it drops in.

    Metrics (optional, prometheus_client objects from ``verl/metrics/catalog.py``):
    ``state_gauge`` → ``verl_reward_model_circuit_state``; ``calls_counter`` (label ``outcome``) →
    ``verl_reward_model_calls_total``: one of ok/timeout/error/oom per model call, plus ``cached`` per
    ``score`` call answered from the cache (a deadline miss included)."""

    def __init__(
        self,
        model: RewardModel,
        *,
        timeout_s: float = 30.0,
        failure_threshold: int = 3,
        cache_size: int = 1000,
        probe_interval_s: float = 5.0,
        deadline_multiplier: float = 0.0,
        deadline_floor_s: float = 0.1,
        clock: Clock | None = None,
        fallback_score: float = 0.0,
        probe_texts: Sequence[str] | None = None,
        state_gauge: Any = None,
        calls_counter: Any = None,
        on_state_change: Callable[[CircuitState], None] | None = None,
    ) -> None:
        if timeout_s <= 0 or failure_threshold < 1 or probe_interval_s <= 0:
            raise ValueError(
                "reward.timeout_s and reward.probe_interval_s must be > 0 and reward.failure_threshold >= 1, got "
                f"{timeout_s}, {probe_interval_s}, {failure_threshold}"
            )
        if deadline_multiplier < 0 or deadline_floor_s < 0:
            raise ValueError("reward.deadline_multiplier and reward.deadline_floor_s must be >= 0, got "
                             f"{deadline_multiplier}, {deadline_floor_s}")
        self.model = model
        self.timeout_s, self.failure_threshold, self.probe_interval_s = timeout_s, failure_threshold, probe_interval_s
        self.deadline_multiplier, self.deadline_floor_s = deadline_multiplier, deadline_floor_s
        self.clock = clock or SystemClock()
        self.fallback_score = fallback_score
        self.cache = ScoreCache(cache_size)
        self._probe_texts = list(probe_texts) if probe_texts else None
        self._gauge, self._calls, self._on_change = state_gauge, calls_counter, on_state_change
        self._lock = threading.Lock()
        self._caller = _Caller()
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._next_probe = 0.0
        self.last_cached = False
        """The last ``score()`` answered from the cache (not the model)."""
        # deadline mode (touched by the calling thread only, except _hung, which a good probe clears)
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._pending: _Call | None = None
        self._hung = False
        self._miss_logged = False
        self.transitions: list[tuple[float, CircuitState]] = []
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="reward-probe", daemon=True)
        self._prober.start()
        self._set_state(CircuitState.CLOSED)

    @property
    def state(self) -> CircuitState:
        return self._state

    @property
    def recoveries(self) -> int:
        """Times the circuit closed again after being open (every CLOSED transition after the first): an
        outage that opens and closes between two looks at ``state`` (a short hang inside one slow step) is
        still seen by whoever counts."""
        return sum(1 for _, state in self.transitions[1:] if state is CircuitState.CLOSED)

    def score(self, texts: Sequence[str], prompts: Sequence[str] | None = None) -> list[float]:
        """Rewards for ``texts``; ``prompts`` (same length) are the cache keys, default ``texts``."""
        texts = list(texts)
        keys = list(prompts) if prompts is not None else texts
        self.last_cached = False
        if self._probe_texts is None and texts:
            self._probe_texts = texts[:1]
        if self._state is CircuitState.CLOSED and self.deadline_multiplier > 0:
            rewards = self._score_within_deadline(texts, keys)
            if rewards is not None:
                return rewards
        elif self._state is CircuitState.CLOSED:
            outcome, rewards = self._call(texts)
            if rewards is not None:
                with self._lock:
                    self._failures = 0
                self.cache.add(keys, rewards)
                return rewards
            self._record_failure(outcome)
        self._count("cached")
        self.last_cached = True  # the caller's reward guard judges the model's scores, not the cache's
        return self.cache.lookup(keys, self.fallback_score)

    def deadline_s(self) -> float:
        """How long a caller waits for a CLOSED-circuit call in deadline mode (see the module docstring)."""
        if self.deadline_multiplier <= 0 or len(self._latencies) < MIN_LATENCY_SAMPLES:
            return self.timeout_s
        p95 = float(np.percentile(np.fromiter(self._latencies, dtype=np.float64), 95))
        return min(self.timeout_s, max(self.deadline_floor_s, self.deadline_multiplier * p95))

    def _score_within_deadline(self, texts: list[str], keys: list[str]) -> list[float] | None:
        """This call's rewards if the model answered within the deadline; None: serve from the cache."""
        self._settle()  # an earlier caller's call: its late answer, error or timeout
        if self._state is not CircuitState.CLOSED or self._pending is not None:
            return None
        budget = 0.0 if self._hung else self.deadline_s()
        call = self._pending = self._start(texts, keys)
        if not self._wait(call, budget):
            if not self._hung and not self._miss_logged:
                self._miss_logged = True
                log.warning("reward model call missed its %.3fs deadline: cached scores until it answers "
                            "(the call times out after reward.timeout_s=%gs)", budget, self.timeout_s)
            self._settle()  # a deadline equal to timeout_s: the miss is a timeout already
            return None
        return self._settle()

    def _settle(self) -> list[float] | None:
        """Judge the call in flight, if any: its rewards when it ended ok (cached too), else None."""
        call = self._pending
        if call is None:
            return None
        if not call.done.is_set():
            if self.clock.now() - call.started < self.timeout_s:
                return None  # still within its timeout: the next caller looks again
            self._pending = None
            if call.thread is not None:
                self._caller.abandon(call.thread)
            self._count("timeout")
            self._hung = True
            self._record_failure("timeout")
            return None
        self._pending = None
        self._hung = False
        outcome, rewards = self._outcome(call)
        if rewards is None:
            self._record_failure(outcome)
            return None
        with self._lock:
            self._failures = 0
        self._miss_logged = False
        self._latencies.append(call.finished - call.started)
        self.cache.add(call.keys, rewards)
        return rewards

    def _start(self, texts: list[str], keys: list[str]) -> _Call:
        call = _Call(keys, len(texts), self.clock.now())

        def run() -> None:
            try:
                call.value = [float(x) for x in self.model.score(list(texts))]
            except BaseException as exc:  # noqa: BLE001 - classified by _outcome, never lost
                call.error = exc
            finally:
                call.finished = self.clock.now()
                call.done.set()

        call.thread = self._caller.submit(run)
        return call

    def _wait(self, call: _Call, budget: float) -> bool:
        """Whether the call ended within ``budget`` seconds of its start. Polls in short real-time slices
        but judges the budget on the injected clock, so a simulated clock can drive it in tests/replay."""
        if budget <= 0:
            return call.done.is_set()
        while not call.done.wait(min(0.02, max(0.001, budget - (self.clock.now() - call.started)))):
            if self.clock.now() - call.started >= budget:
                return False
        return True

    def _outcome(self, call: _Call) -> tuple[str, list[float] | None]:
        """Classify and count a call that ended."""
        if call.error is not None:
            exc = call.error
            outcome = "oom" if is_oom(exc) else "error"
            log.warning("reward model call failed (%s): %s", outcome, str(exc).splitlines()[0] if str(exc) else exc)
            self._count(outcome)
            return outcome, None
        if call.value is None or len(call.value) != call.size:
            self._count("error")
            return "error", None
        self._count("ok")
        return "ok", call.value

    def _call(self, texts: list[str]) -> tuple[str, list[float] | None]:
        """A call that holds the caller up to ``timeout_s`` (probes, and callers without a deadline)."""
        call = self._start(texts, texts)
        if not self._wait(call, self.timeout_s):
            if call.thread is not None:
                self._caller.abandon(call.thread)
            self._count("timeout")
            return "timeout", None
        return self._outcome(call)

    def _record_failure(self, outcome: str) -> None:
        with self._lock:
            self._failures += 1
            trip = self._failures >= self.failure_threshold and self._state is CircuitState.CLOSED
            if trip:
                self._next_probe = self.clock.now() + self.probe_interval_s
        if trip:
            log.warning("reward model circuit OPEN after %d consecutive failures (last: %s)", self._failures, outcome)
            self._set_state(CircuitState.OPEN)

    def _probe_loop(self) -> None:
        while not self._stop.wait(min(0.05, self.probe_interval_s / 4)):
            if self._state is not CircuitState.OPEN or self.clock.now() < self._next_probe:
                continue
            self._set_state(CircuitState.HALF_OPEN)
            outcome, _ = self._call(list(self._probe_texts or ["health probe"]))
            with self._lock:
                self._next_probe = self.clock.now() + self.probe_interval_s
                if outcome == "ok":
                    self._failures = 0
                    self._hung = False
            self._set_state(CircuitState.CLOSED if outcome == "ok" else CircuitState.OPEN)

    def _set_state(self, state: CircuitState) -> None:
        changed = state is not self._state or not self.transitions
        self._state = state
        if self._gauge is not None:
            self._gauge.set(int(state))
        if changed:
            self.transitions.append((self.clock.now(), state))
            if self._on_change is not None:
                self._on_change(state)

    def _count(self, outcome: str) -> None:
        if self._calls is not None:
            self._calls.labels(outcome=outcome).inc()

    def state_dict(self) -> dict[str, Any]:
        """The score cache only: a restarted trainer starts CLOSED and re-learns the model's health."""
        return {"cache": self.cache.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cache.load_state_dict(state["cache"])

    def close(self) -> None:
        self._stop.set()
        self._prober.join(timeout=1.0)
        self._pending = None
        self._caller.abandon_all()
