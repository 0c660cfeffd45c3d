"""Expected gaps, memory against the work, stage slowdowns and the run's silent ends, on verl-shaped logs
replayed live with the default rules.

    .venv/bin/python benchmarks/verl_gaps.py [--quick] [--json]

Runs are written in verl 0.9's ``Tracking(file)`` layout (``{"step": N, "data": {...}}``, ``timing_s/*``
with ``testing`` outside ``timing_s/step`` and ``save_checkpoint`` inside it, ``val-core/*`` on validation
steps, ``actor/perf/*``) and replayed as ``benchmarks/verl_runs_real.py`` replays one (line by line at
its true time, tailed by ``JsonlTail`` into the daemon's ``Pipeline``, polled every 30 s):

- healthy: steps of 10 s to 1 h with +-50 % jitter, a validation every ``test_freq`` in (5, 10, 20, 25, 50)
  steps lasting 4 min or 0.3-2 steps, a checkpoint every 10/25/50 steps of 0.2-1 step: P0-P2 pages
  counted (goal 0), reported per 100 run-days;
- hang: a 30-min hang inside ``update_actor`` at 30-s steps, at a training step and at a validation step:
  minutes from the hang's start to TrainingStalled (goal <= 5 at a training step);
- before NCCL's abort (the run's resolved config giving ``actor_rollout_ref.nccl_timeout: 600``): a 30-min
  hang at 200-s steps, minutes to TrainingStalled with and without the config (goal < 10: the abort), and
  healthy runs of 60 s to 10 min (+-50 %) with the config: P0-P2 pages (goal 0);
- host RAM (``actor/perf/cpu_memory_used_gb`` 189 -> 731 GB), a weight sync 2.7 -> 21.5 s
  (``timing_s/update_weights``), a log closed at step 60 of 100: the step paged (steps after the onset).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.verl_runs_real import PAGES, simulate
from monitor.evaluation.rules import load_rule_files

T0 = 1_780_000_000.0
RULES = load_rule_files(None)


def write_run(steps: int, step_s: float, rng: random.Random, *, test_freq: int = 10, val_s: float = 0.0,
              save_freq: int = 50, save_s: float = 0.0, hang_at: int | None = None, cpu_gb=None,
              sync_s=None) -> tuple[list[bytes], list[float], list[float]]:
    """(lines, record times, hang start times) of one run."""
    lines, times, hangs, t = [], [], [], T0
    for step in range(1, steps + 1):
        s = step_s * rng.uniform(0.5, 1.5)
        hang = 1800.0 if step == hang_at else 0.0
        sync = sync_s(step) if sync_s else 0.02 * step_s
        save = save_s * rng.uniform(0.8, 1.25) if step % save_freq == 0 else 0.0
        data = {"timing_s/gen": 0.5 * s, "timing_s/reward": 0.05 * s, "timing_s/old_log_prob": 0.05 * s,
                "timing_s/update_actor": 0.2 * s + hang, "timing_s/update_weights": sync * rng.uniform(0.8, 1.2),
                "critic/score/mean": 0.5 + rng.gauss(0, 0.05), "actor/entropy": 0.6 + rng.gauss(0, 0.02),
                "actor/pg_loss": rng.gauss(0, 0.02), "actor/grad_norm": 0.6 + rng.gauss(0, 0.05),
                "actor/perf/max_memory_allocated_gb": 40.0, "actor/perf/max_memory_reserved_gb": 44.0,
                "actor/perf/cpu_memory_used_gb": cpu_gb(step) if cpu_gb else 210.0 + rng.uniform(-3, 3),
                "response_length/mean": 400.0 + rng.gauss(0, 10), "response_length/max": 1024.0,
                "perf/total_num_tokens": 128 * 700.0, "training/global_step": step}
        data["timing_s/step"] = 0.8 * s + hang + data["timing_s/update_weights"] + save
        data["perf/time_per_step"] = data["timing_s/step"]
        data["perf/throughput"] = data["perf/total_num_tokens"] / data["timing_s/step"] / 8
        if save:
            data["timing_s/save_checkpoint"] = save
        if step % test_freq == 0:
            data["timing_s/testing"] = val_s * rng.uniform(0.8, 1.25)
            data["val-core/openai/gsm8k/reward/mean@1"] = 0.5 + rng.gauss(0, 0.02)
        if hang:
            hangs.append(t + 0.6 * s)
        t += data["timing_s/step"] + data.get("timing_s/testing", 0.0)
        lines.append(json.dumps({"step": step, "data": data}).encode() + b"\n")
        times.append(t)
    return lines, times, hangs


def replay(lines: list[bytes], times: list[float], step_s: float, total: int,
           config: str | None = None) -> list[tuple[float, dict]]:
    with tempfile.TemporaryDirectory(prefix="verl-gaps-") as tmp:
        resolved = None
        if config is not None:
            resolved = Path(tmp) / "config.yaml"
            resolved.write_text(config)
        return [(t, r) for t, r in simulate(lines, times, step_s, RULES, Path(tmp), None, total_steps=total,
                                            resolved_config=resolved)
                if r.get("kind") == "alert" and r.get("status") == "firing"]


def pages(events: list[tuple[float, dict]]) -> list[tuple[float, str]]:
    return [(t, r["labels"]["alertname"]) for t, r in events if r["labels"].get("severity") in PAGES]


def healthy(quick: bool) -> dict:
    out, days, false = [], 0.0, 0
    step_times = (10.0, 40.0, 300.0, 3600.0) if quick else (10.0, 40.0, 120.0, 600.0, 3600.0)
    for step_s in step_times:
        for i, test_freq in enumerate((5, 10, 20, 25, 50)):
            rng = random.Random(int(step_s) * 100 + test_freq)
            steps = 150 if step_s <= 120 else 60 if step_s <= 600 else 30
            val_s = (240.0, 0.3 * step_s, 2.0 * step_s)[i % 3] if step_s < 3600 else 0.3 * step_s
            lines, times, _ = write_run(steps, step_s, rng, test_freq=test_freq, val_s=val_s,
                                        save_freq=(10, 25, 50)[i % 3], save_s=(0.2, 0.5, 1.0)[i % 3] * step_s)
            got = pages(replay(lines, times, step_s, steps))
            days += (times[-1] - T0) / 86400.0
            false += len(got)
            out.append({"step_s": step_s, "test_freq": test_freq, "val_s": round(val_s), "pages": sorted({n for _, n in got})})
    return {"case": "healthy", "runs": len(out), "run_days": round(days, 2), "false_pages": false,
            "false_pages_per_100_run_days": round(100.0 * false / days, 1) if days else None,
            "paged_runs": [r for r in out if r["pages"]]}


def hangs() -> dict:
    out = []
    for hang_at, where in ((47, "training step"), (63, "training step"), (40, "validation step"), (80, "validation step")):
        rng = random.Random(hang_at)
        lines, times, starts = write_run(100, 30.0, rng, test_freq=20, val_s=240.0, save_freq=10, save_s=20.0,
                                         hang_at=hang_at)
        got = [t for t, n in pages(replay(lines, times, 30.0, 100)) if n == "TrainingStalled" and t >= starts[0]]
        out.append({"hang_at": hang_at, "where": where,
                    "delay_min": round((got[0] - starts[0]) / 60.0, 2) if got else None})
    return {"case": "hang_30s_steps", "runs": out}


NCCL_CONFIG = "actor_rollout_ref: {nccl_timeout: 600}\n"


def nccl() -> dict:
    """A hang at 200-s steps (3 median steps = NCCL's default 600 s) with and without the timeout known, and
    healthy runs with it known."""
    out: dict = {"case": "nccl_timeout_known", "hang_200s_steps": [], "healthy": []}
    for config in (None, NCCL_CONFIG):
        rng = random.Random(7)
        lines, times, starts = write_run(60, 200.0, rng, test_freq=20, val_s=240.0, save_freq=50, save_s=20.0,
                                         hang_at=33)
        got = [t for t, n in pages(replay(lines, times, 200.0, 60, config)) if n == "TrainingStalled" and t >= starts[0]]
        out["hang_200s_steps"].append({"config": config is not None,
                                       "delay_min": round((got[0] - starts[0]) / 60.0, 2) if got else None})
    for step_s in (60.0, 200.0, 400.0, 600.0):
        for i, test_freq in enumerate((5, 10, 25)):
            rng = random.Random(int(step_s) * 10 + test_freq)
            lines, times, _ = write_run(60, step_s, rng, test_freq=test_freq, val_s=(240.0, 0.3 * step_s, step_s)[i],
                                        save_freq=(10, 25, 50)[i], save_s=(0.2, 0.5, 1.0)[i] * step_s)
            got = sorted({n for _, n in pages(replay(lines, times, step_s, 60, NCCL_CONFIG))})
            out["healthy"].append({"step_s": step_s, "test_freq": test_freq, "pages": got})
    out["healthy_false_pages"] = sum(len(r["pages"]) for r in out["healthy"])
    return out


def onset_cases() -> dict:
    out = []
    rng = random.Random(1)
    lines, times, _ = write_run(110, 60.0, rng, cpu_gb=lambda s: 189.0 + 6.0 * max(0, s - 20) + rng.uniform(-2, 2))
    out.append(_first("host_ram_189_to_731", replay(lines, times, 60.0, 110), times, 20, "HostMemoryExhaustion"))
    rng = random.Random(2)
    lines, times, _ = write_run(120, 60.0, rng, sync_s=lambda s: 2.7 if s < 60 else 21.5)
    out.append(_first("update_weights_2.7_to_21.5", replay(lines, times, 60.0, 120), times, 60, "StageSlowdown"))
    rng = random.Random(3)
    lines, times, _ = write_run(60, 60.0, rng)
    out.append(_first("log_closed_at_60_of_100", replay(lines, times, 60.0, 100), times, 60, "TrainingEndedEarly"))
    return {"case": "onsets", "runs": out}


def _first(name: str, events: list[tuple[float, dict]], times: list[float], onset: int, alert: str) -> dict:
    onset_t = times[onset - 1]
    hit = next((t for t, n in pages(events) if n == alert and t >= onset_t), None)
    false = sorted({n for t, n in pages(events) if n != alert and n not in ("TrainerDown", "ThroughputDrop")})
    return {"run": name, "alert": alert, "delay_steps": sum(1 for x in times if onset_t < x <= hit) if hit else None,
            "paged": hit is not None, "other_pages": false}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer step times (4 instead of 5)")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args(argv)
    started = time.process_time()
    for result in (healthy(args.quick), hangs(), nccl(), onset_cases()):
        print(json.dumps(result) if args.json else json.dumps(result, indent=1), flush=True)
    print(json.dumps({"benchmark": "verl_gaps", "cpu_s": round(time.process_time() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
