"""The soak's pure parts: the seeded fault plan and Meta's ETTR accounting (no processes)."""

from __future__ import annotations

import pytest

from harness.soak import EVIDENCE, plan_faults, productive_seconds


def test_plan_is_seeded_about_one_per_interval_and_kills_every_fourth() -> None:
    plan = plan_faults(300, 60, seed=7)
    assert plan == plan_faults(300, 60, seed=7)
    assert [f.kind for f in plan] != [f.kind for f in plan_faults(300, 60, seed=8)] or \
        [f.at_s for f in plan] != [f.at_s for f in plan_faults(300, 60, seed=8)]
    assert len(plan) == 5  # 30, 90, 150, 210, 270 s (+-25 %); none in the last 20 s
    assert all(0 < f.at_s < 280 for f in plan)
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)
    assert plan[3].kind == "trainer_kill"
    assert sorted(f.kind for f in plan[:3]) == ["critic_oom", "reward_hang", "worker_kill"]


def test_a_reward_hang_never_comes_right_before_a_trainer_kill() -> None:
    # the breaker's alert (for: 30s) needs the hang to outlive the next interval
    for seed in range(40):
        kinds = [f.kind for f in plan_faults(900, 60, seed=seed)]
        assert all(not (a == "reward_hang" and b == "trainer_kill") for a, b in zip(kinds, kinds[1:], strict=False))


def test_recomputed_steps_and_restart_time_are_not_productive() -> None:
    first = {s: float(s) for s in range(1, 11)}        # steps 1..10, one per second, then SIGKILL
    second = {s: 14.0 + s for s in range(6, 16)}       # resumed from checkpoint 5 at t=20, steps 6..15
    # run 1: steps 1..5 survive (5 s); steps 6..10 were recomputed; run 2: 10 steps of 1 s
    assert productive_seconds([first, second], [0, 5]) == pytest.approx(15.0)
    # without a failure every step counts, and the first step gets the median gap, not the start-up
    assert productive_seconds([{s: 10.0 + 2 * s for s in range(1, 6)}], [0]) == pytest.approx(10.0)
    # a restart that found no checkpoint recomputes everything: run 1 contributes nothing
    assert productive_seconds([first, {s: 30.0 + s for s in range(1, 4)}], [0, 0]) == pytest.approx(3.0)


def test_evidence_patterns_match_the_trainer_log_lines() -> None:
    kill = "2026-11-29 14:47:11,198 WARNING verl.trainer.faults: fault injection: SIGKILL trainer at step 323"
    worker = ("2026-11-29 14:49:01,000 WARNING verl.workers.pool: rollout worker 1 (pid 42) died with exit "
              "code -9; restarting, 4 prompt(s) re-queued")
    assert EVIDENCE["trainer_kill"].search(kill)
    assert EVIDENCE["worker_kill"].search(worker)
    assert not EVIDENCE["worker_kill"].search(kill)
    assert not EVIDENCE["critic_oom"].search(worker)


def test_ettr_from_first_step_counts_the_first_step_and_never_exceeds_one(tmp_path) -> None:  # noqa: ANN001
    import argparse
    from types import SimpleNamespace

    from harness.soak import Soak

    soak = Soak(argparse.Namespace(duration=60, fault_interval=20, seed=0, correlation_window="20s", quiet=True),
                tmp_path)
    steps = {s: 5.0 + 0.1 * (s - 1) for s in range(1, 101)}  # 0.1 s steps, the first done at 5.0
    steps[101] = 15.5  # completed after the measured end: not productive
    soak.incarnations = [SimpleNamespace(trainer=SimpleNamespace(step_times=steps), resumed_from=0)]
    soak.end_t = 14.95  # the last counted step (100) completed at 14.9
    # 100 steps x 0.1 s over the span from the first step's start (4.9) to the end
    assert soak._ettr_from_first_step() == pytest.approx(10.0 / (14.95 - 4.9))
    assert soak._ettr(14.95) == pytest.approx(10.0 / 14.95)
