"""Wall time a reward-model hang costs a ppo_tiny run, against a healthy run of the same length.

    python benchmarks/reward_hang.py [--steps 100] [--hang-at 20] [--hang-seconds 6] [--variants ...] [--json]

In-process runs (``RLTrainer``), one after the other, same seed: ``healthy`` (no fault), ``wait`` (a hang at
``--hang-at`` with ``reward.deadline_multiplier=0``: every call is waited for up to ``reward.timeout_s``, the
behaviour before the deadline) and ``deadline`` (the default reward deadline). ``reward.timeout_s=1`` and
``reward.probe_interval_s=1`` (the soak's timeout). Per run: steps/s before the hang, during it (from the
hang step to the step after the probe closed the circuit again) and after; ``reward_s_lost`` = the reward
stage's seconds from the hang step on minus as many healthy reward stages (median), the cost of the
hang itself; ``wall_s_lost`` = the hang window's step seconds minus as many healthy steps (median), which
also holds what cached-score steps cost or save in the updates (the reward guard may pause some). Run
against an older checkout with ``PYTHONPATH=/that/checkout`` (no deadline key there: ``wait`` runs plainly and
``deadline`` is skipped). One JSON line per run with --json, then a summary line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from a checkout
    sys.path.insert(0, str(ROOT))

from verl.config.schema import RewardConfig  # noqa: E402
from verl.fault import CircuitState  # noqa: E402
from verl.trainer import RLTrainer  # noqa: E402

FAST = ["metrics.layer_kl=false", "trainer.torch_threads=1", "reward.timeout_s=1", "reward.probe_interval_s=1"]
HAS_DEADLINE = any(f.name == "deadline_multiplier" for f in dataclasses.fields(RewardConfig))


def run(variant: str, steps: int, hang_at: int, hang_seconds: float) -> dict[str, Any]:
    overrides = [*FAST, f"trainer.total_steps={steps}"]
    if variant != "healthy":
        overrides += [f"faults.reward_hang_at_step={hang_at}", f"faults.reward_hang_seconds={hang_seconds}"]
    if variant == "wait" and HAS_DEADLINE:
        overrides.append("reward.deadline_multiplier=0")
    trainer = RLTrainer("ppo_tiny", overrides=overrides)
    rows: list[tuple[int, float, float, CircuitState]] = []
    try:
        while trainer.global_step < steps:
            t0 = time.perf_counter()
            result = trainer.step()
            rows.append((trainer.global_step, time.perf_counter() - t0, result.stage_seconds["reward"],
                         trainer.reward_path.breaker.state))
        breaker = trainer.reward_path.breaker
        calls = trainer.registry["verl_reward_model_calls_total"]
        out: dict[str, Any] = {
            "variant": variant, "steps": len(rows),
            "timeouts": calls.labels(outcome="timeout")._value.get(),
            "cached": calls.labels(outcome="cached")._value.get(),
            "opened": any(s is CircuitState.OPEN for _, s in breaker.transitions),
        }
        latencies = sorted(getattr(breaker, "_latencies", []))
        if latencies:
            out["ok_latency_ms"] = {"p50": round(1e3 * latencies[len(latencies) // 2], 2),
                                    "p95": round(1e3 * latencies[int(0.95 * (len(latencies) - 1))], 2),
                                    "max": round(1e3 * latencies[-1], 2)}
            out["deadline_s"] = round(breaker.deadline_s(), 3)
    finally:
        trainer.close()
    out["rows"] = rows
    return out


def window(rows: list[tuple[int, float, float, CircuitState]], hang_at: int) -> tuple[int, int]:
    """Row indices [start, end) of the hang: the hang step up to the step after the circuit closed again."""
    start = next(i for i, r in enumerate(rows) if r[0] >= hang_at)
    opened = next((i for i in range(start, len(rows)) if rows[i][3] is not CircuitState.CLOSED), None)
    if opened is None:
        return start, len(rows)
    closed = next((i for i in range(opened, len(rows)) if rows[i][3] is CircuitState.CLOSED), len(rows) - 1)
    return start, closed + 1


def rate(rows: list[tuple[int, float, float, CircuitState]]) -> float | None:
    seconds = sum(r[1] for r in rows)
    return round(len(rows) / seconds, 2) if rows and seconds > 0 else None


def summarize(res: dict[str, Any], healthy: dict[str, Any], hang_at: int) -> dict[str, Any]:
    rows, base = res.pop("rows"), healthy["rows"]
    step_s = statistics.median(r[1] for r in base)
    reward_s = statistics.median(r[2] for r in base)
    if res["variant"] == "healthy":
        start, end = len(rows), len(rows)
    else:
        start, end = window(rows, hang_at)
    during, after = rows[start:end], rows[end:]
    res.update({
        "steps_per_s": {"before": rate(rows[:start]), "during": rate(during), "after": rate(after)},
        "hang_window_steps": len(during),
        "max_step_s": round(max((r[1] for r in during), default=0.0), 3),
        "reward_s_lost": round(sum(r[2] for r in rows[start:]) - reward_s * len(rows[start:]), 3),
        "wall_s_lost": round(sum(r[1] for r in during) - step_s * len(during), 3),
        "healthy_step_s": round(step_s, 4),
    })
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--hang-at", type=int, default=20)
    ap.add_argument("--hang-seconds", type=float, default=6.0)
    ap.add_argument("--variants", nargs="+", default=["healthy", "wait", "deadline"],
                    choices=["healthy", "wait", "deadline"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.hang_at < args.steps or args.hang_seconds <= 0:
        print("error: need 1 <= --hang-at < --steps and --hang-seconds > 0", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    logging.disable(logging.WARNING)  # the fault's own warnings are expected
    variants = [v for v in dict.fromkeys(["healthy", *args.variants]) if v != "deadline" or HAS_DEADLINE]
    results = {v: run(v, args.steps, args.hang_at, args.hang_seconds) for v in variants}
    healthy_rows = list(results["healthy"]["rows"])
    summaries = [summarize(results[v], {"rows": healthy_rows}, args.hang_at) for v in variants]
    for s in summaries:
        print(json.dumps(s) if args.json else f"{s['variant']:>8}: {s}", flush=True)
    lost = {s["variant"]: s["reward_s_lost"] for s in summaries if s["variant"] != "healthy"}
    summary = {"reward_s_lost": lost, "healthy_step_s": summaries[0]["healthy_step_s"],
               "deadline_available": HAS_DEADLINE}
    print(json.dumps(summary) if args.json else f" summary: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
