"""The ``faults:`` section drives the real fault-tolerance paths inside a real PPO run: the reward-model
circuit breaker (hang), reward OOM, critic OOM degradation and the stop after a second OOM."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from verl.cli.train import main as train_main
from verl.fault import CircuitState
from verl.trainer import RLTrainer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
FAST = ["metrics.layer_kl=false", "trainer.torch_threads=1"]


def counter(trainer: RLTrainer, name: str, **labels: str) -> float:
    return trainer.registry[name].labels(**labels)._value.get()


def test_reward_hang_opens_and_closes_the_circuit_within_the_bound() -> None:
    # the hang (5 s) outlasts three timeouts plus the steps between them, so the circuit must open; the run
    # goes on until the circuit has closed again and 5 steps more (steps on cached scores only skip the actor
    # update, so how many steps the hang spans depends on the machine). It starts at step 8, after the
    # MIN_LATENCY_SAMPLES ok calls from which the reward deadline is derived.
    timeout_s, probe_s = 1.0, 1.0
    trainer = RLTrainer("ppo_tiny", overrides=[
        *FAST, "trainer.total_steps=1000", f"reward.timeout_s={timeout_s}", f"reward.probe_interval_s={probe_s}",
        "faults.reward_hang_at_step=8", "faults.reward_hang_seconds=5"])
    breaker = trainer.reward_path.breaker
    reward_seconds, closed_at = 0.0, None
    try:
        while trainer.global_step < trainer.config.trainer.total_steps:
            reward_seconds += trainer.step().stage_seconds["reward"]
            states = [state for _, state in breaker.transitions]
            if closed_at is None and CircuitState.OPEN in states and states[-1] is CircuitState.CLOSED:
                closed_at = trainer.global_step
            if closed_at is not None and trainer.global_step >= closed_at + 5:
                break
    finally:
        trainer.close()
    assert closed_at is not None and trainer.global_step == closed_at + 5  # training went on after the hang
    assert CircuitState.OPEN in states and states[-1] is CircuitState.CLOSED
    assert states.index(CircuitState.OPEN) < len(states) - 1  # closed again after opening
    assert counter(trainer, "verl_reward_model_calls_total", outcome="timeout") == 3
    assert counter(trainer, "verl_reward_model_calls_total", outcome="cached") >= 3  # cached scores were used
    # The bound on the extra wall time of a hang: one reward deadline (the 0.1 s floor here) -- the steps
    # do not wait out the timeouts (3 x timeout_s, which this bound would fail). The reward stage of the
    # whole run (normal scoring included) must fit in one timeout.
    assert reward_seconds <= timeout_s, reward_seconds


def test_reward_oom_is_counted_once_and_sheds_the_backlog() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=[*FAST, "trainer.total_steps=6", "rollout.prefetch_batches=3",
                                               "faults.reward_oom_at_step=5", "rollout.oom_backoff_steps=0"])
    sizes = []
    try:
        for _ in range(6):
            trainer.step()
            sizes.append(len(trainer.buffer))
    finally:
        trainer.close()
    assert counter(trainer, "verl_oom_events_total", component="reward") == 1
    assert counter(trainer, "verl_reward_model_calls_total", outcome="oom") == 1
    assert sizes[3] == 3 * 16 and sizes[4] <= sizes[3] // 2  # the drop the RolloutBufferDrop alert sees
    assert sizes[5] > sizes[4]  # and it refills


def test_a_reward_oom_counted_after_its_step_sheds_at_the_next_step() -> None:
    # a call that missed its deadline can run out of memory on its own thread after the step moved on
    trainer = RLTrainer("ppo_tiny", overrides=[*FAST, "trainer.total_steps=5", "rollout.prefetch_batches=3",
                                               "rollout.oom_backoff_steps=0"])
    try:
        for _ in range(4):
            trainer.step()
        full = len(trainer.buffer)
        trainer.reward_path.counting.ooms += 1  # what OOMCountingReward does when the late call fails
        trainer.step()
        after_shed = len(trainer.buffer)
    finally:
        trainer.close()
    assert full == 3 * 16 and after_shed <= full // 2


def test_critic_oom_degrades_and_completes_visible_in_metrics() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=[*FAST, "trainer.total_steps=4", "faults.critic_oom_at_step=2",
                                               "metrics.port=0"])
    url = trainer.start_metrics_server()
    try:
        result = trainer.train()
        text = httpx.get(url, timeout=10).text  # the printed URL is the /metrics one
    finally:
        trainer.close()
    assert result.steps == 4
    assert trainer.updates.critic.degraded and trainer.updates.critic.current_micro_batches == 4
    assert not trainer.updates.actor.degraded
    assert re.search(r'^verl_degraded_mode\{component="critic"\} 1\.0$', text, re.M)
    assert re.search(r'^verl_oom_events_total\{component="critic"\} 1\.0$', text, re.M)
    assert re.search(r'^verl_degraded_mode\{component="actor"\} 0\.0$', text, re.M)


def test_second_oom_while_degraded_checkpoints_then_stops_with_exit_3(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = train_main(["--config", "ppo_tiny", *FAST, "trainer.total_steps=6", "faults.critic_oom_at_step=3",
                       "faults.critic_oom_repeat=2", "--checkpoint-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "degraded mode" in lines[0] and "global_step_3" in lines[0], err
    assert (tmp_path / "global_step_3" / "COMPLETE").exists()


def test_each_reward_call_outcome_is_counted_once() -> None:
    trainer = RLTrainer("ppo_tiny", overrides=[*FAST, "trainer.total_steps=2"])
    try:
        trainer.step()  # through the breaker: it counts
        assert counter(trainer, "verl_reward_model_calls_total", outcome="ok") == 1

        class Plain:
            def score(self, texts: list[str]) -> list[float]:
                return [0.5] * len(texts)

        trainer.reward = Plain()  # the seam: a bare model, counted by the reward stage instead
        trainer.step()
        assert counter(trainer, "verl_reward_model_calls_total", outcome="ok") == 2
    finally:
        trainer.close()
