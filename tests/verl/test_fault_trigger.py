"""``faults.trigger_file``: faults injected at run time, through the same components as the step-number faults."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from verl.config.schema import FaultsConfig
from verl.fault import CircuitState
from verl.trainer import RLTrainer
from verl.trainer.fault_injection import FaultTrigger, FaultyReward, StepOOM


def append(path: Path, *lines: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(lines))


class Rule:
    def score(self, texts: list[str]) -> list[float]:
        return [0.0 for _ in texts]


def make_trigger(path: Path) -> tuple[FaultTrigger, StepOOM]:
    step_oom = StepOOM(None)
    return FaultTrigger(path, FaultyReward(Rule(), FaultsConfig()), step_oom), step_oom


def test_only_complete_lines_appended_after_the_first_check_are_injected(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    append(path, json.dumps({"fault": "critic_oom"}) + "\n")  # a predecessor's fault: never re-injected
    trigger, step_oom = make_trigger(path)
    trigger.poll(1)
    assert trigger.injected == []
    append(path, '{"fault": "critic_oom"}\n', '{"fault": "reward_')  # the second line is still being written
    trigger.poll(2)
    assert trigger.injected == [(2, "critic_oom")]
    step_oom.step = 2
    with pytest.raises(torch.OutOfMemoryError):
        step_oom.maybe_raise("critic")
    append(path, 'hang"}\n')
    trigger.poll(3)
    trigger.poll(4)  # nothing new: one stat, nothing injected twice
    assert trigger.injected == [(2, "critic_oom"), (3, "reward_hang")]


def test_a_missing_file_counts_as_empty_and_a_replaced_one_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    trigger, _ = make_trigger(path)
    trigger.poll(1)  # no file yet
    append(path, '{"fault": "reward_hang"}\n')
    trigger.poll(2)
    path.unlink()
    path.write_text('{"fault": "critic_oom"}\n')  # a new, shorter file
    trigger.poll(3)
    assert trigger.injected == [(2, "reward_hang"), (3, "critic_oom")]


def test_bad_lines_are_counted_and_logged_once_and_never_stop_the_plan(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "faults.jsonl"
    trigger, _ = make_trigger(path)
    trigger.poll(1)
    append(path, "not json\n", "[1, 2]\n", "null\n", '{"fault": "trainer_kill"}\n', '{"fault": 3}\n', "\n",
           '{"fault": "critic_oom"}\n')
    with caplog.at_level(logging.WARNING, logger="verl.trainer.fault_injection"):
        trigger.poll(2)
    assert trigger.bad_lines == 5
    assert trigger.injected == [(2, "critic_oom")]
    ignored = [r for r in caplog.records if "ignored line" in r.getMessage()]
    assert len(ignored) == 1 and "not json" in ignored[0].getMessage()


def test_an_unreadable_trigger_path_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dir"
    trigger, _ = make_trigger(path)
    trigger.poll(1)
    path.mkdir()  # stat works, open fails
    with caplog.at_level(logging.WARNING, logger="verl.trainer.fault_injection"):
        for step in range(2, 6):
            trigger.poll(step)
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 1
    assert trigger.injected == []


def test_triggered_faults_take_the_real_paths_in_the_trainer(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    trainer = RLTrainer("ppo_tiny", overrides=[
        "trainer.total_steps=10", f"faults.trigger_file={path}", "faults.reward_hang_seconds=1",
        "reward.timeout_s=0.05", "reward.failure_threshold=1", "trainer.torch_threads=0",
        "trainer.deterministic=false", "metrics.layer_kl=false"])
    try:
        trainer.step()
        assert not trainer.updates.critic.degraded
        append(path, '{"fault": "critic_oom"}\n', "{oops\n")
        trainer.step()
        # the OOM degrader caught a real OutOfMemoryError in step 2's critic update and retried it degraded
        assert trainer.updates.critic.degraded and trainer.updates.critic.oom_events == 1
        assert trainer.reward_path.breaker.state is CircuitState.CLOSED
        append(path, '{"fault": "reward_hang"}\n')
        trainer.step()  # the hung call times out, the breaker opens, cached scores serve the step
        assert CircuitState.OPEN in [s for _, s in trainer.reward_path.breaker.transitions]
        trigger = trainer.fault_plan.trigger
        assert trigger is not None
        assert trigger.injected == [(2, "critic_oom"), (3, "reward_hang")] and trigger.bad_lines == 1
        assert trainer.global_step == 3
    finally:
        trainer.close()
