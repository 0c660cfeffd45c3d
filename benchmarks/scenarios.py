"""Training-fault scenarios through the monitor's replay pipeline with its default rules.

    .venv/bin/python benchmarks/scenarios.py [--seeds 3] [--only NAME] [--rules FILE] [--json]

Each scenario generates recorded series (realistic noise and scrape intervals, both name families
where dcgm has the field), replays them with `monitor.replay.run_recording` on simulated time (the
same pipeline as the daemon) and reads the alert records back. Reported per scenario and seed:
detection delay of the expected alert after the fault's onset (against its deadline) and false
alarms — any other alert, or the expected one before onset — per simulated day. Last line:
{"scenarios": n, "detected": k, "missed": [...], "late": [...], "false_alarms": m,
 "false_alarms_per_day": r, "simulated_days": d}.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, fail
from benchmarks._replay import replay_firing
from monitor.evaluation.rules import Rule, RuleError, load_rule_files
from monitor.sources.recorded import from_columns

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated time starts here
HOUR = 3600.0
VERL = {"instance": "gpu-08:8000", "job": "verl"}
DCGM = {"Hostname": "gpu-08", "gpu": "0"}

Column = tuple[str, dict[str, str], list[float], list[float]]


@dataclass
class Scenario:
    name: str
    hours: float
    build: Callable[[np.random.Generator], list[Column]]
    expect: str | None = None  # alertname that must fire; None for clean runs
    onset_h: float = 0.0
    deadline_s: float = 0.0
    note: str = ""


@dataclass
class Outcome:
    scenario: str
    seed: int
    detected: bool | None
    delay_s: float | None
    deadline_s: float
    false_alarms: list[str] = field(default_factory=list)
    days: float = 0.0


def grid(hours: float, step: float) -> np.ndarray:
    return T0 + np.arange(0.0, hours * HOUR, step)


def ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """Stationary AR(1) noise with marginal standard deviation sigma."""
    e = rng.normal(0.0, sigma * np.sqrt(1 - phi * phi), n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, sigma)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


def col(name: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray) -> Column:
    return (name, dict(labels), t.tolist(), v.tolist())


# -- series generators -------------------------------------------------------------------------------

def tokens(rng: np.random.Generator, hours: float, step: float, drop_at_h: float | None, to: float,
           noise: float, burst: bool) -> Column:
    t = grid(hours, step)
    since = t - T0
    level = np.full(len(t), 12000.0)
    level[since < 180] *= 0.2 + 0.8 * since[since < 180] / 180  # compile / cache warm-up ramp
    if burst:  # the first minutes run short prompts: a fast burst, then the steady state
        level[(since >= 180) & (since < 480)] = 16000.0
    if drop_at_h is not None:
        level[since >= drop_at_h * HOUR] = to
    return col("verl_actor_tokens_per_second", VERL, t, level * (1 + noise * rng.standard_normal(len(t))))


def gpu_util(rng: np.random.Generator, hours: float) -> Column:
    t = grid(hours, 5.0)
    return col("verl_gpu_utilization_ratio", {**VERL, "gpu": "0"}, t, np.clip(0.9 + 0.03 * rng.standard_normal(len(t)), 0, 1))


def kl(rng: np.random.Generator, hours: float, drift_at_h: float | None, phi: float) -> Column:
    t = grid(hours, 30.0)  # one value per training step
    since = (t - T0) / HOUR
    base = np.full(len(t), 0.02)
    if drift_at_h is not None:
        ramp = np.clip(since - drift_at_h, 0.0, 1.0)  # 0.02 -> 0.08 over one hour, then stays
        base = base + 0.06 * ramp
    return col("verl_kl_divergence", VERL, t, base + ar1(rng, len(t), phi, 0.01))


def gpu_memory(rng: np.random.Generator, hours: float, leak_mb_min: float, leak_at_h: float,
               family: str, sawtooth_gb: float, period_s: float = 90.0) -> Column:
    t = grid(hours, 5.0)
    since = t - T0
    period = period_s * (1 + 0.1 * rng.random())  # one allocation cycle per PPO step
    saw = sawtooth_gb * 1e9 * ((since % period) / period)
    leak = np.clip(since - leak_at_h * HOUR, 0.0, None) / 60.0 * leak_mb_min * 1e6
    used = 40e9 + saw + leak + 50e6 * rng.standard_normal(len(t))
    if family == "dcgm":
        return col("DCGM_FI_DEV_FB_USED", DCGM, t, used / 2**20)  # dcgm-exporter reports MiB
    return col("verl_gpu_memory_used_bytes", {**VERL, "gpu": "0"}, t, used)


def cpu(rng: np.random.Generator, hours: float, busy: tuple[float, float] | None, spikes: int) -> Column:
    t = grid(hours, 1.0)
    v = np.clip(0.55 + 0.08 * rng.standard_normal(len(t)), 0, 1)
    if busy is not None:
        a, b = (T0 + busy[0] * HOUR, T0 + busy[1] * HOUR)
        v[(t >= a) & (t < b)] = 0.97 + 0.01 * rng.random(int(((t >= a) & (t < b)).sum()))
    for i in rng.choice(len(t), size=spikes, replace=False):
        v[i] = 0.99  # a lone sample at 99 %: must alert nothing
    return col("verl_host_cpu_utilization_ratio", VERL, t, v)


def swinging_memory(rng: np.random.Generator, hours: float, swing: tuple[float, float] | None) -> Column:
    t = grid(hours, 5.0)
    v = 40e9 + 50e6 * rng.standard_normal(len(t))
    if swing is not None:
        m = (t >= T0 + swing[0] * HOUR) & (t < T0 + swing[1] * HOUR)
        v[m] += np.where(np.arange(m.sum()) % 4 < 2, 4e9, 0.0)  # +-10 % swings while the host starves the GPU
    return col("verl_gpu_memory_used_bytes", {**VERL, "gpu": "0"}, t, v)


def reward_std(rng: np.random.Generator, hours: float, high: tuple[float, float] | None) -> Column:
    t = grid(hours, 30.0)
    v = 0.6 + 0.05 * rng.standard_normal(len(t))
    if high is not None:
        m = (t >= T0 + high[0] * HOUR) & (t < T0 + high[1] * HOUR)
        v[m] = 0.88 + 0.02 * rng.standard_normal(int(m.sum()))  # above 0.8, under RewardVarianceSpike's x3 variance
    return col("verl_reward_std", VERL, t, v)


def training_signals(rng: np.random.Generator, hours: float) -> list[Column]:
    """Healthy per-step (30 s) training signals the UnusualTrainingMetric rules watch: entropy slowly
    decaying, heavy-tailed gradient norms, clip fraction and a critic loss settling, each with AR(1)
    noise (consecutive PPO steps are correlated)."""
    t = grid(hours, 30.0)
    h = (t - T0) / HOUR
    n = len(t)
    entropy = 0.8 + 0.4 * np.exp(-h / 48.0) + ar1(rng, n, 0.8, 0.03)
    actor_gn = np.exp(ar1(rng, n, 0.5, 0.35)) * 1.5
    critic_gn = np.exp(ar1(rng, n, 0.5, 0.3)) * 4.0
    clip = np.clip(0.12 + ar1(rng, n, 0.6, 0.02), 0.0, 1.0)
    critic_loss = (0.3 + 0.2 * np.exp(-h / 24.0)) * np.exp(ar1(rng, n, 0.6, 0.15))
    return [col("verl_entropy", VERL, t, entropy), col("verl_grad_norm", {**VERL, "model": "actor"}, t, actor_gn),
            col("verl_grad_norm", {**VERL, "model": "critic"}, t, critic_gn), col("verl_clip_fraction", VERL, t, clip),
            col("verl_critic_loss", VERL, t, critic_loss)]


# An anomaly alert on the faulted series after the fault's onset is a second true detection, not a
# false alarm; before onset, or in a clean run, it is a false alarm like any other.
ANOMALY_ALERT = "UnusualTrainingMetric"


# -- the scenarios -----------------------------------------------------------------------------------

def scenarios() -> list[Scenario]:
    return [
        Scenario("throughput_halved_15s", 4, lambda r: [tokens(r, 4, 15, 2, 6000, 0.05, False), gpu_util(r, 4)],
                 "ThroughputDrop", 2, 300, "12000 -> 6000 tok/s, 15 s scrape, 5 % noise"),
        Scenario("throughput_40pct_30s_warmup", 4, lambda r: [tokens(r, 4, 30, 2, 7200, 0.08, True), gpu_util(r, 4)],
                 "ThroughputDrop", 2, 300, "12000 -> 7200 tok/s after a warm-up ramp and burst, 30 s scrape, 8 % noise"),
        Scenario("kl_drift_white", 4, lambda r: [kl(r, 4, 2, 0.0)], "KLDriftDetected", 2, 2400,
                 "KL 0.02 -> 0.08 over 1 h, sigma 0.01; deadline = KL crossing 0.06"),
        Scenario("kl_drift_ar1", 4, lambda r: [kl(r, 4, 2, 0.7)], "KLDriftDetected", 2, 2400,
                 "same with AR(1) phi 0.7 noise"),
        Scenario("leak_20mb_sawtooth_verl", 4, lambda r: [gpu_memory(r, 4, 20, 2, "verl", 8.0)],
                 "MemoryLeakSuspected", 2, 1800, "20 MB/min under an 8 GB, ~90 s allocator sawtooth, verl_* bytes"),
        Scenario("leak_20mb_sawtooth_dcgm", 4, lambda r: [gpu_memory(r, 4, 20, 2, "dcgm", 8.0)],
                 "MemoryLeakSuspected", 2, 1800, "same on DCGM_FI_DEV_FB_USED (MiB)"),
        Scenario("leak_20mb_slow_steps", 4, lambda r: [gpu_memory(r, 4, 20, 2, "verl", 2.0, 200.0)],
                 "MemoryLeakSuspected", 2, 1800, "harder: 2 GB sawtooth with 200-220 s PPO steps (> the rule's 2 min floor)"),
        Scenario("cpu_bound", 2, lambda r: [cpu(r, 2, (1, 1.05), 0), swinging_memory(r, 2, (0.95, 1.1))],
                 "CPUBoundBottleneck", 1, 60, "CPU 97 % for 3 min while GPU memory swings 10 %"),
        Scenario("reward_std_6min", 2, lambda r: [reward_std(r, 2, (1, 1.1))], "RewardDistributionDrift", 1, 420,
                 "reward std 0.88 for 6 min"),
        Scenario("clean_3days", 72, lambda r: [
            tokens(r, 72, 15, None, 0, 0.05, True), gpu_util(r, 72), kl(r, 72, None, 0.7),
            gpu_memory(r, 72, 0.0, 0, "verl", 8.0), gpu_memory(r, 72, 0.0, 0, "dcgm", 8.0),
            reward_std(r, 72, None), *training_signals(r, 72)], None, 0, 0,
            "3 days, every series healthy (AR(1) KL, sawtooth memory, per-step training signals)"),
        Scenario("near_misses_24h", 24, lambda r: [
            gpu_memory(r, 24, 5, 0, "verl", 8.0), cpu(r, 24, None, 40),
            cpu_high_flat_memory(r), flat_memory_node9(r), reward_std(r, 24, (12, 12 + 2 / 60))], None, 0, 0,
            "5 MB/min growth, 40 lone 99 % CPU samples, CPU high with flat GPU memory (other node), reward std 0.88 for 2 min"),
    ]


def cpu_high_flat_memory(rng: np.random.Generator) -> Column:
    name, labels, t, v = cpu(rng, 24, (6, 7), 0)
    return name, {**labels, "instance": "gpu-09:8000"}, t, v  # another node, whose GPU memory is flat


def flat_memory_node9(rng: np.random.Generator) -> Column:
    name, labels, t, v = swinging_memory(rng, 24, None)
    return name, {**labels, "instance": "gpu-09:8000"}, t, v


def false_alarms(sc: Scenario, firing: list[tuple[str, float]]) -> list[str]:
    """Every alert but the expected one, and anything before the fault's onset ("name@hours")."""
    onset = T0 + sc.onset_h * HOUR
    also_true = {sc.expect, ANOMALY_ALERT} if sc.expect else set()
    return [f"{a}@{(s - T0) / HOUR:.2f}h" for a, s in firing if a not in also_true or s < onset]


def run_one(sc: Scenario, seed: int, rules: list[Rule] | None = None) -> Outcome:
    rng = np.random.default_rng(seed)
    rules = rules if rules is not None else load_rule_files(None)
    firing = [(labels["alertname"], t) for labels, t in replay_firing(from_columns(sc.build(rng), 0), rules)]
    onset = T0 + sc.onset_h * HOUR
    hits = sorted(s for a, s in firing if a == sc.expect and s >= onset)
    false = false_alarms(sc, firing)
    delay = hits[0] - onset if hits else None
    detected = None if sc.expect is None else bool(hits)
    return Outcome(sc.name, seed, detected, delay, sc.deadline_s, false, sc.hours / 24)


def worst_delay(runs: list[Outcome]) -> float | None:
    """The longest delay over seeds; None when any seed missed the fault."""
    if any(r.delay_s is None for r in runs):
        return None
    return max(r.delay_s for r in runs if r.delay_s is not None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="random seeds per scenario (default 3)")
    ap.add_argument("--only", help="run just this scenario")
    ap.add_argument("--rules", action="append", help="rules file(s) instead of the monitor's defaults")
    ap.add_argument("--json", action="store_true", help="per-run lines as JSON too")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        return fail(f"--seeds {args.seeds}: expected a count >= 1")
    chosen = [s for s in scenarios() if args.only in (None, s.name)]
    if not chosen:
        return fail(f"--only {args.only}: no such scenario; use one of {', '.join(s.name for s in scenarios())}")
    try:
        rules = load_rule_files(args.rules)
    except RuleError as exc:
        return fail(str(exc))
    results = [run_one(sc, seed, rules) for sc in chosen for seed in range(args.seeds)]
    for r in results:
        if args.json:
            emit(r.__dict__)
        else:
            state = "clean" if r.detected is None else ("MISSED" if not r.detected else f"delay {r.delay_s:.0f}s/{r.deadline_s:.0f}s")
            print(f"{r.scenario:30s} seed={r.seed} {state:22s} false_alarms={len(r.false_alarms)} {r.false_alarms[:5]}")
    days = sum(r.days for r in results)
    fa = sum(len(r.false_alarms) for r in results)
    emit({
        "scenarios": len(results),
        "detected": sum(1 for r in results if r.detected),
        "missed": [f"{r.scenario}/{r.seed}" for r in results if r.detected is False],
        "late": [f"{r.scenario}/{r.seed}" for r in results if r.detected and (r.delay_s or 0) > r.deadline_s],
        "max_delay_s": {s.name: worst_delay([r for r in results if r.scenario == s.name]) for s in chosen if s.expect},
        "false_alarms": fa,
        "false_alarms_per_day": round(fa / days, 3) if days else 0.0,
        "unusual_training_metric_false_alarms": sum(f.startswith(ANOMALY_ALERT + "@") for r in results
                                                    for f in r.false_alarms),
        "simulated_days": round(days, 2),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
