"""The reward guard judges the reward model, not the breaker's cache: during a hang the steps' scores come
from the similarity cache and must neither be judged nor enter the guard's reference, and once the model
answers again the guard re-learns its reference (before this, every soak's reward hang ended in a false
RewardVarianceSpike: the model's first real batches against a reference of cached scores)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from test_ft_breaker import PROMPTS, FlakyModel

from verl.fault import CircuitState, RewardCircuitBreaker
from verl.trainer import RLTrainer
from verl.trainer.reward_stage import RewardStage
from verl.utils.clock import SimulatedClock

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def test_cached_scores_are_not_judged_and_recovery_restarts_the_reference() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=[
        "trainer.total_steps=40", "metrics.layer_kl=false", "rollout_worker_num=0", "reward.timeout_s=0.3",
        "reward.probe_interval_s=0.3", "faults.reward_hang_at_step=6", "faults.reward_hang_seconds=2",
        # the first timed-out call opens the breaker: with 3, a loaded machine's slow steps made too few calls
        # during the 2 s hang to open it at all (cached scores, no outage, nothing to re-learn)
        "reward.failure_threshold=1"])
    guard = trainer.data_guards.reward
    judged: list[tuple[int, int]] = []  # (step, rewards judged)
    restarts: list[int] = []
    check, restart = guard.check, guard.restart_reference

    def recording_check(rewards, prompts=None, step=None, responses=None):  # noqa: ANN001, ANN202
        judged.append((step, len(rewards)))
        return check(rewards, prompts, step, responses=responses)

    def recording_restart() -> None:
        restarts.append(trainer.global_step)
        restart()

    guard.check, guard.restart_reference = recording_check, recording_restart
    try:
        trainer.train()
    finally:
        trainer.close()
    steps = {s for s, _ in judged}
    unjudged = set(range(1, 41)) - steps
    assert unjudged, "every step was judged: the hang's cached scores went to the guard"
    assert min(unjudged) >= 6  # only steps from the hang on ran on cached scores
    assert trainer.reward_path.breaker.state.name == "CLOSED"  # the model answered again
    # re-learned once, when the circuit closed: in the last step on cached scores (the probe closes it while
    # that step is served from the cache; restarts holds the step before it) or after it
    assert len(restarts) == 1 and restarts[0] + 1 >= max(unjudged)
    assert all(n > 0 for _, n in judged)


def test_an_outage_that_opens_and_closes_between_two_steps_still_restarts_the_reference() -> None:
    """On a slow step a short hang can open the breaker and the probe close it again before the stage looks
    at its state once more: the recovery is counted, so the guard still re-learns its reference."""
    clock = SimulatedClock(1000.0)
    model = FlakyModel(clock=clock, advance_on_hang=31.0)
    breaker = RewardCircuitBreaker(model, clock=clock)  # 30 s timeout, 3 failures, 5 s probe
    restarts: list[float] = []
    guards = SimpleNamespace(reward=SimpleNamespace(restart_reference=lambda: restarts.append(clock.now())))
    stage = RewardStage(SimpleNamespace(reward_batch_size=8), SimpleNamespace(breaker=breaker), guards,  # type: ignore[arg-type]
                        None, None, clock, None)  # type: ignore[arg-type]

    def step() -> None:
        stage.score([SimpleNamespace(prompt=p, response="", extra={}, reward=None) for p in PROMPTS])

    try:
        step()
        model.hang.set()
        for _ in range(3):  # inside one step: three calls time out and the breaker opens
            breaker.score(PROMPTS[:1])
        assert breaker.state is CircuitState.OPEN
        model.hang.clear()
        model.release.set()
        clock.advance(5.0)  # the probe finds the model answering and closes the breaker, still inside that step
        deadline = time.monotonic() + 10
        while breaker.state is not CircuitState.CLOSED and time.monotonic() < deadline:
            time.sleep(0.02)
        assert breaker.state is CircuitState.CLOSED and not restarts
        step()
        assert len(restarts) == 1
        step()
        assert len(restarts) == 1  # once per recovery
    finally:
        model.release.set()
        breaker.close()
