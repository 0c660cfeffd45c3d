"""Reward guard: pauses on healthy runs (false pauses) and reward-model faults caught.

Healthy rewards are recorded from real ppo_tiny runs (one process per seed, the guard switched off so
every step trains), then ``RewardGuard`` with its defaults judges them step by step. Faults replace one
batch at a few points of each run with what a broken reward model returns:

    scale    scores from N(batch mean, 1): the model's output scale blew up
    corrupt  three scores replaced by 9.0, -8.0, 7.5: a few garbage values
    noise    the batch's spread ×5 plus N(0, 0.3) noise: a model answering at random
    zeros3   three scores set to 0.0 (inside the reward's range: the hard case)

The guard sees each batch's responses as the trainer passes them: empty answers take no part in its
judgement (their 0.0 is honest), so a fault that zeroes the scores of real answers stays visible.

    python benchmarks/reward_guard.py --json                 # 3 seeds × 300 steps, ~4 min on 2 cores
    python benchmarks/reward_guard.py --seeds 1 --steps 100  # quick look
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import numpy as np

FAULTS = ("scale", "corrupt", "noise", "zeros3")
INJECT_AT = (0.3, 0.6, 0.9)  # fractions of the run


Batch = tuple[list[float], list[str]]  # rewards and the responses they score


def record_rewards(seed: int, steps: int, overrides: list[str]) -> list[Batch]:
    """The rewards (and their responses) the guard would judge at every step of one ppo_tiny run, guard
    switched off."""
    import transformers

    from verl.trainer import RLTrainer

    transformers.logging.set_verbosity_error()
    trainer = RLTrainer("ppo_tiny", overrides=[f"trainer.total_steps={steps}", f"trainer.seed={seed}",
                                               "metrics.layer_kl=false", "guard.variance_jump=1e9",
                                               "guard.extreme_ratio=0.99", *overrides])
    guard = trainer.data_guards.reward
    judge = guard.check
    seen: list[Batch] = []

    def recording(rewards, prompts=None, step=None, responses=None):  # noqa: ANN001, ANN202 - RewardGuard.check's signature
        seen.append(([float(r) for r in rewards], [str(x) for x in (responses or [""] * len(rewards))]))
        return judge(rewards, prompts, step, responses=responses)

    guard.check = recording
    try:
        trainer.train()
    finally:
        trainer.close()
    return seen


def inject(kind: str, batch: list[float], rng: np.random.Generator) -> list[float]:
    b = np.asarray(batch, dtype=np.float64)
    if kind == "scale":
        return rng.normal(b.mean(), 1.0, b.size).tolist()
    if kind == "corrupt":
        b[:3] = [9.0, -8.0, 7.5]
    elif kind == "noise":
        b = (b - b.mean()) * 5 + b.mean() + rng.normal(0.0, 0.3, b.size)
    elif kind == "zeros3":
        b[:3] = 0.0
    return b.tolist()


def judge(runs: list[list[Batch]]) -> dict:
    from verl.data.reward_guard import RewardGuard

    rng = np.random.default_rng(0)
    pauses: list[int] = []
    reasons: Counter[str] = Counter()
    caught: Counter[str] = Counter()
    trials = 0
    for rewards in runs:
        guard = RewardGuard()
        verdicts = [guard.check(b, responses=r) for b, r in rewards]
        pauses.append(sum(v.skip for v in verdicts))
        reasons.update(v.reason for v in verdicts if v.skip)
        for at in (int(f * len(rewards)) for f in INJECT_AT):
            trials += 1
            warmed = RewardGuard()
            for b, r in rewards[:at]:
                warmed.check(b, responses=r)
            batch, responses = rewards[at]
            for kind in FAULTS:  # each fault meets the same guard state; the responses stay what they were
                caught[kind] += copy.deepcopy(warmed).check(inject(kind, batch, rng), responses=responses).skip
    steps = sum(len(r) for r in runs)
    return {"healthy_steps": steps, "false_pauses": sum(pauses), "false_pauses_per_run": pauses,
            "false_pause_rate": round(sum(pauses) / steps, 4), "false_pause_reasons": dict(reasons),
            "faults_caught": {k: f"{caught[k]}/{trials}" for k in FAULTS},
            "fault_catch_rate": {k: round(caught[k] / trials, 3) for k in FAULTS}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="ppo_tiny runs (trainer.seed 0..N-1)")
    p.add_argument("--steps", type=int, default=300, help="steps per run")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="extra trainer override for the recorded runs (repeatable), e.g. actor.lr=0.002")
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.steps < 20:
        print("reward_guard: --seeds must be >= 1 and --steps >= 20", file=sys.stderr)
        return 2
    with ProcessPoolExecutor(max_workers=min(args.seeds, os.cpu_count() or 1)) as pool:
        runs = list(pool.map(record_rewards, range(args.seeds), [args.steps] * args.seeds,
                             [args.override] * args.seeds))
    result = {"benchmark": "reward_guard", "seeds": args.seeds, "steps": args.steps,
              "overrides": args.override, **judge(runs)}
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
