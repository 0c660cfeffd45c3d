"""Rollout worker pool under repeated SIGKILL: every prompt yields exactly one, worker-independent result."""

from __future__ import annotations

import operator
import os
import random
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from verl.workers import RolloutTask, RolloutWorkerPool, seed_everything


def generate(prompt: str, seed: int) -> str:
    time.sleep(0.01)  # long enough that kills land on busy workers
    return f"{prompt}|{random.random():.12f}"


def generate_or_die(prompt: str, seed: int) -> str:
    if prompt == "poison":
        os._exit(3)
    if prompt == "raise":
        raise ValueError("cannot generate this one")
    return prompt.upper()


def expected(prompt: str, seed: int) -> str:
    seed_everything(seed)
    return f"{prompt}|{random.random():.12f}"


def test_sigkills_lose_and_duplicate_nothing() -> None:
    reg = CollectorRegistry()
    alive = Gauge("verl_rollout_workers_alive", "", registry=reg)
    restarts = Counter("verl_rollout_worker_restarts", "", registry=reg)
    cpu = Gauge("verl_rollout_worker_cpu_ratio", "", ["worker"], registry=reg)
    tasks = [RolloutTask(id=f"p{i}", prompt=f"prompt {i}", seed=1000 + i) for i in range(400)]
    # 12 kills 80 ms apart can hit one slow-to-restart worker's same 2 prompts 5 times in a row on a loaded machine,
    # and 5 crashes make a prompt poison (an error result, tested below): allow more crashes than there are kills.
    pool = RolloutWorkerPool(generate, 2, start_method="fork", alive_gauge=alive, restarts_counter=restarts, cpu_gauge=cpu,
                             max_task_crashes=13)
    kills: list[int] = []
    done = threading.Event()

    def killer() -> None:
        rng = random.Random(0)
        while len(kills) < 12 and not done.is_set():
            time.sleep(0.08)
            index = rng.randrange(2)
            try:
                # a worker killed but not yet reaped still reads alive: killing it again is not a second crash
                proc = pool._workers[index].proc
                if proc.is_alive() and proc.pid not in kills:
                    kills.append(pool.kill_worker(index))
            except (ProcessLookupError, IndexError):
                pass

    with pool:
        thread = threading.Thread(target=killer)
        thread.start()
        results = pool.map(tasks)
        while len(kills) < 12:  # the batch finished first on a fast machine: keep the pool busy
            results += pool.map([RolloutTask(f"x{len(results)}-{i}", f"extra {i}", i) for i in range(20)])
        done.set()
        thread.join()
        # the pool restarts a dead worker when it next supervises (inside map): one more batch sees the last kill
        results += pool.map([RolloutTask(f"y{i}", f"last {i}", i) for i in range(4)])
        results = results[:400]
        assert [r.id for r in results] == [t.id for t in tasks]  # one result per prompt, in order
        assert all(r.error is None for r in results)
        assert [r.output for r in results] == [expected(t.prompt, t.seed) for t in tasks]
        assert {r.worker for r in results} == {0, 1}
        assert pool.restarts >= 10 and restarts._value.get() == pool.restarts
        assert alive._value.get() == 2 and pool.alive() == 2
        assert {s.labels["worker"] for s in cpu.collect()[0].samples} <= {"0", "1"}
    assert pool.alive() == 0


def test_poison_prompt_and_errors_yield_one_result_each() -> None:
    tasks = [RolloutTask(i, p, i) for i, p in enumerate(["a", "poison", "b", "raise", "c"])]
    with RolloutWorkerPool(generate_or_die, 2, start_method="fork", max_task_crashes=2) as pool:
        results = pool.map(tasks)
    assert [r.output for r in results] == ["A", None, "B", None, "C"]
    assert results[1].error == "worker crashed 2 times on this prompt"
    assert results[3].error == "ValueError: cannot generate this one"
    assert pool.restarts == 2


def test_default_start_method_and_a_restarted_worker_gets_the_function() -> None:
    with RolloutWorkerPool(operator.add, 2) as pool:  # forkserver: nothing inherited from the trainer
        assert [r.output for r in pool.map([RolloutTask(i, i * 10, i) for i in range(6)])] == [0, 11, 22, 33, 44, 55]
        pool.kill_worker(0)
        assert [r.output for r in pool.map([RolloutTask(i, i * 20, i) for i in range(6)])] == [0, 21, 42, 63, 84, 105]
        assert pool.restarts == 1
