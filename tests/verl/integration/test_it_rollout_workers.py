"""Rollout worker processes under ``faults.kill_rollout_worker_at_steps``: eleven SIGKILLs mid-step, every
prompt still yields exactly one rollout, the supervisor restarts each worker, and the trained weights are
bit-identical to a run without kills (results do not depend on which worker ran a prompt)."""

from __future__ import annotations

import pytest

from verl.trainer import RLTrainer

KILL_STEPS = list(range(1, 12))
ARGS = ["trainer.total_steps=12", "rollout_worker_num=2", "rollout.worker_chunk_size=2", "metrics.layer_kl=false"]


def run(kill_steps: list[int]) -> tuple[str, list[tuple[list[int], list[int]]], float, int]:
    trainer = RLTrainer("ppo_tiny", overrides=[*ARGS, f"faults.kill_rollout_worker_at_steps={kill_steps}"])
    seen: list[tuple[list[int], list[int]]] = []
    generate = trainer.rollout.generate

    def recording(prompts: list, step: int) -> list:
        out = generate(prompts, step)
        seen.append(([p.prompt_id for p in prompts], [r.prompt_id for r in out]))
        return out

    trainer.rollout.generate = recording
    try:
        trainer.train()
        restarts = trainer.registry["verl_rollout_worker_restarts_total"]._value.get()
        alive = int(trainer.registry["verl_rollout_workers_alive"]._value.get())
        digest = trainer.param_digest()
    finally:
        trainer.close()
    return digest, seen, restarts, alive


@pytest.mark.slow
def test_eleven_worker_kills_lose_and_duplicate_nothing() -> None:
    digest, seen, restarts, alive = run(KILL_STEPS)
    assert restarts >= 10 and alive == 2
    assert len(seen) == 12
    for asked, answered in seen:
        assert answered == asked  # one rollout per prompt: none lost, none duplicated, in order
    clean_digest, clean_seen, clean_restarts, _ = run([])
    assert clean_restarts == 0
    assert seen == clean_seen
    assert digest == clean_digest
