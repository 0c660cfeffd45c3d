"""Rollout worker processes under ``faults.kill_rollout_worker_at_steps``: eleven SIGKILLs mid-step, every
prompt still yields exactly one rollout, the supervisor restarts each worker, and the trained weights are
bit-identical to a run without kills and to in-process generation (results do not depend on which worker ran
a prompt)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl.trainer import RLTrainer

HERE = Path(__file__).resolve().parent

KILL_STEPS = list(range(1, 12))
ARGS = ["trainer.total_steps=12", "rollout.worker_chunk_size=2", "metrics.layer_kl=false"]


def run(kill_steps: list[int], workers: int = 2) -> tuple[str, list[tuple[list[int], list[int]]], float, int]:
    """One in-process run; returns (param digest, [(prompt ids asked, rollout ids answered)], restarts, alive)."""
    trainer = RLTrainer("ppo_tiny", overrides=[*ARGS, f"faults.kill_rollout_worker_at_steps={kill_steps}",
                                               f"rollout_worker_num={workers}"])
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
        for name in ("verl_rollout_prompts_lost_total", "verl_rollout_prompts_duplicated_total"):
            assert trainer.registry[name]._value.get() == 0, name  # what the soak reads
        digest = trainer.param_digest()
    finally:
        trainer.close()
    return digest, seen, restarts, alive


def both_runs() -> str:
    return json.dumps({"killed": run(KILL_STEPS), "clean": run([]), "in_process": run([], workers=0)})


@pytest.mark.slow
def test_eleven_worker_kills_lose_and_duplicate_nothing() -> None:
    # A fresh interpreter: the workers' forkserver must start with the trainer's preload (torch and the model
    # code imported once); one started earlier by another test in this process would make every restart
    # re-import them.
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_it_rollout_workers as t; print(t.both_runs())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    digest, seen, restarts, alive = runs["killed"]
    assert restarts >= 10 and alive == 2
    assert len(seen) == 12
    for asked, answered in seen:
        assert answered == asked  # one rollout per prompt: none lost, none duplicated, in order
    clean_digest, clean_seen, clean_restarts, _ = runs["clean"]
    assert clean_restarts == 0
    assert seen == clean_seen
    assert digest == clean_digest
    assert runs["in_process"][0] == digest  # worker processes and in-process generation train identically
