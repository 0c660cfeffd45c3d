"""The training-signal corpus, written with volcengine verl 0.9.1's own code (``--set signals`` of
benchmarks/verl_real_runs_writer.py, which runs it; see that file for the virtual environment).

(a) A healthy corpus: PPO, GRPO, REINFORCE++, RLOO and DAPO (GRPO with dynamic sampling); 10 s to 1 h steps
with up to +-50 % jitter; validation every ``trainer.test_freq`` steps and checkpoints every ``save_freq``;
lr warm-ups with a 25x early grad norm; responses growing R1-style (x5) or shrinking early; entropy falling
smoothly (0.9 -> 0.25); noisy small-batch rewards; KL growing slowly with the KL loss on; some fully-async
runs (off-policy staleness 0-2 versions), some resumed from a checkpoint (verl's ``FileLogger`` re-opens its
log with ``"wb"``).
(b) A sweep per fault family of the signal catalogue over magnitude x speed (ramp steps) x cadence: entropy
collapse, response-length collapse, zero learning signal (every group's rewards equal), train-inference
mismatch, off-policy staleness, aborted responses, DAPO generation batches (zero-variance groups).

verl's code computes what it computes in a trainer: ``apply_kl_penalty``, ``compute_advantage`` (GAE, GRPO,
REINFORCE++, RLOO), ``agg_loss`` (entropy), ``compute_data_metrics`` (lengths, scores, advantages,
``response/aborted_ratio`` from zero-length responses), ``calculate_debug_metrics``
(``training/rollout_probs_diff_*``, ``training/rollout_actor_probs_pearson_corr`` from rollout vs actor
log-probs), ``compute_rollout_corr_metrics_from_logprobs`` (``rollout_corr/*``), ``compute_timing_metrics``,
``compute_throughout_metrics``, ``reduce_metrics``; ``Tracking(default_backend=["file"])`` writes the log.
Two keys are written here as verl writes them, from a formula too small to call: the v1 trainer's
``training/off_policy/trajectory_staleness/*`` (``global_steps - 1 - max_global_steps``, trainer_base.py) and
DAPO's ``train/num_gen_batches`` (the recipe's dynamic-sampling loop, not in the wheel).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np
import torch
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import AdvantageEstimator, FixedKLController, agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_corr_metrics_from_logprobs
from verl.utils.debug.metrics import calculate_debug_metrics
from verl.utils.tracking import Tracking

from verl import DataProto

torch.set_num_threads(1)  # small tensors: the thread pool's hand-offs cost 100x the math on a shared host
T0 = 1_785_542_400.0  # 2026-08-01T00:00:00Z
GIB = 2.0**30
PROMPT = 16
ESTIMATOR = {"ppo": AdvantageEstimator.GAE, "grpo": AdvantageEstimator.GRPO, "dapo": AdvantageEstimator.GRPO,
             "reinforce": AdvantageEstimator.REINFORCE_PLUS_PLUS, "rloo": AdvantageEstimator.RLOO}
KL_IN_REWARD = {"ppo", "reinforce"}
# family -> (alerts about it, deadline in steps after the ramp ends, magnitudes, magnitude at/above which
# the catalogue promises a page: the documented boundary)
FAMILIES = {
    "entropy_collapse": (["PolicyEntropyShift"], 20, (3.0, 5.0, 10.0), 5.0),
    "length_collapse": (["ResponseLengthCollapse"], 15, (3.0, 8.0, 45.0), 5.0),
    "zero_signal": (["LearningSignalLost"], 10, (0.9, 1.0), 1.0),
    "mismatch": (["TrainInferenceMismatch"], 15, (2.0, 6.0, 20.0), 5.0),
    "staleness": (["OffPolicyStalenessHigh"], 15, (2.0, 5.0, 10.0), 5.0),
    "aborted": (["RolloutResponsesAborted"], 15, (0.05, 0.2, 0.5), 0.2),
    "gen_batches": (["ZeroVarianceGroups"], 15, (3.0, 7.0, 10.0), 7.0),
}
RAMPS = (1, 15, 60)
CADENCES = (20.0, 480.0, 3600.0)


@dataclass
class Plan:
    name: str
    algo: str
    step_s: float
    steps: int
    jitter: float = 0.1
    test_freq: int = 0
    save_freq: int = 0
    warmup: bool = False        # lr warm-up: grad norm 25x at the start, decaying
    length: tuple[float, float] = (60.0, 80.0)  # mean response length at the start and the end
    cap: int = 128
    entropy: tuple[float, float] = (0.7, 0.5)
    reward_noise: bool = False  # a small, noisy batch
    kl_growth: float = 0.0      # KL loss on, growing this much over the run
    async_: bool = False
    resume: bool = False
    family: str = "healthy"
    onset: int | None = None
    magnitude: float = 0.0
    ramp_steps: int = 1
    extra: dict = field(default_factory=dict)


def ramp(p: Plan, step: int) -> float:
    if p.onset is None or step < p.onset:
        return 0.0
    return min(1.0, (step - p.onset + 1) / p.ramp_steps)


def healthy_plans(seed: int, n: int) -> list[Plan]:
    rng = np.random.default_rng(seed)
    algos = ("ppo", "grpo", "reinforce", "rloo", "dapo")
    plans = []
    for i in range(n):
        algo = algos[i % len(algos)]
        step_s = float(np.exp(rng.uniform(math.log(10.0), math.log(3600.0))))
        steps = int(rng.integers(120, 220))
        long = rng.random() < 0.2
        # R1-style growth x5 (600 -> 3000 tokens), in a 1024-token frame: the judge is scale-free, the writer 6x faster
        length = (100.0, 500.0) if long else (float(rng.uniform(40, 90)), float(rng.uniform(30, 110)))
        e0 = float(rng.uniform(0.5, 0.9))
        plans.append(Plan(
            name=f"healthy-{i:03d}-{algo}-{int(step_s)}s", algo=algo, step_s=step_s, steps=steps,
            jitter=float(rng.uniform(0.0, 0.5)), test_freq=int(rng.choice([0, 5, 10, 20])),
            save_freq=int(rng.choice([0, 10, 20, 50])), warmup=bool(rng.random() < 0.4), length=length,
            cap=1024 if long else 128, entropy=(e0, e0 * float(rng.uniform(0.28, 0.9))),
            reward_noise=bool(rng.random() < 0.3), kl_growth=float(rng.choice([0.0, 0.01, 0.02])),
            async_=bool(rng.random() < 0.25), resume=bool(rng.random() < 0.1)))
    return plans


def sweep_plans() -> list[Plan]:
    """Each family over magnitude x ramp, the cadence cycling through CADENCES (one cadence per pair: the
    judge counts steps, so the product would triple the corpus for what the steps already cover)."""
    plans = []
    for family, (_, _, mags, _) in FAMILIES.items():
        algos = ("grpo", "rloo") if family == "zero_signal" else ("dapo",) if family == "gen_batches" else ("grpo", "ppo")
        for m, mag in enumerate(mags):
            for r_i, r in enumerate(RAMPS if family != "zero_signal" else (1, 10)):
                j = (m + r_i) % len(CADENCES)
                step_s, algo = CADENCES[j], algos[(m + r_i) % len(algos)]
                plans.append(Plan(
                    name=f"{family}-x{mag:g}-ramp{r}-{algo}-{int(step_s)}s", algo=algo, step_s=step_s,
                    steps=90 + r + 40, jitter=0.2, test_freq=10, save_freq=20, warmup=j == 1,
                    async_=family == "staleness", family=family, onset=90, magnitude=mag, ramp_steps=r))
    return plans


class Run:
    def __init__(self, p: Plan, rng: np.random.Generator) -> None:
        self.p, self.rng = p, rng
        self.n = 1 if p.algo == "ppo" else 4
        self.prompts = 8 if p.reward_noise else 16
        self.ent_ar = self.kl_ar = 0.0
        self.peak = 0.0
        self.len0 = 0.0

    def frac(self, step: int) -> float:
        return step / self.p.steps

    def mean_len(self, step: int) -> float:
        a, b = self.p.length
        v = a + (b - a) * self.frac(step)
        if self.p.family == "length_collapse":
            v /= self.p.magnitude ** ramp(self.p, step)
        return v

    def entropy(self, step: int) -> float:
        self.ent_ar = 0.8 * self.ent_ar + float(self.rng.normal(0, 0.01))
        a, b = self.p.entropy
        e = b + (a - b) * math.exp(-3.0 * self.frac(step)) + self.ent_ar
        if self.p.family == "entropy_collapse":
            e /= self.p.magnitude ** ramp(self.p, step)
        return max(e, 0.003)

    def mismatch_sd(self, step: int) -> float:
        # bf16 rollout vs trainer: a small log-prob noise; a fault multiplies it (stale weights after a sync)
        sd = 0.02
        if self.p.family == "mismatch":
            sd *= self.p.magnitude ** ramp(self.p, step)
        return sd


def batch_for(run: Run, step: int, kl: float) -> DataProto:
    rng, p = run.rng, run.p
    bsz = run.prompts * run.n
    width = p.cap
    lens = np.clip(rng.normal(run.mean_len(step), 0.2 * run.mean_len(step) + 2, bsz), 2, width).astype(int)
    aborted = 0.01 * rng.random()
    if p.family == "aborted":
        aborted += p.magnitude * ramp(p, step)
    lens[rng.random(bsz) < aborted] = 0  # an aborted request returns no tokens (compute_data_metrics' mask)
    prompt_len = rng.integers(6, PROMPT + 1, bsz)
    cols = np.arange(PROMPT + width)
    attn_np = ((cols >= PROMPT - prompt_len[:, None]) & (cols < PROMPT + lens[:, None])).astype(np.int64)
    attn = torch.from_numpy(attn_np)
    response_mask = attn[:, PROMPT:].clone()
    p_correct = 0.3 + 0.4 * run.frac(step) + (rng.normal(0, 0.1) if p.reward_noise else 0.0)
    seq_score = (rng.random(bsz) < np.clip(p_correct, 0.02, 0.98)).astype(np.float32)
    if p.family == "zero_signal" and ramp(p, step) >= 1.0:
        # every group's rewards equal: all right or all wrong (a reward that ignores the answer)
        same = rng.random(run.prompts) < p.magnitude
        group = np.repeat(rng.random(run.prompts) < p_correct, run.n).astype(np.float32)
        seq_score = np.where(np.repeat(same, run.n), group, seq_score)
    scores = torch.zeros(bsz, width)
    idx = np.maximum(lens - 1, 0)
    scores[torch.arange(bsz), torch.from_numpy(idx)] = torch.from_numpy(seq_score) * torch.from_numpy((lens > 0).astype(np.float32))
    old_lp = torch.tensor(rng.normal(-1.2, 0.4, (bsz, width)), dtype=torch.float32).clamp(max=-0.01)
    ref_lp = old_lp - torch.tensor(rng.normal(kl, 0.05, (bsz, width)), dtype=torch.float32)
    rollout_lp = (old_lp + torch.tensor(rng.normal(0, run.mismatch_sd(step), (bsz, width)), dtype=torch.float32)).clamp(max=0.0)
    tensors = {"prompts": torch.ones(bsz, PROMPT, dtype=torch.int64), "responses": torch.ones(bsz, width, dtype=torch.int64),
               "attention_mask": attn, "response_mask": response_mask, "token_level_scores": scores,
               "old_log_probs": old_lp, "ref_log_prob": ref_lp, "rollout_log_probs": rollout_lp}
    if p.algo == "ppo":
        tensors["values"] = torch.tensor(rng.normal(0.4, 0.2, (bsz, width)), dtype=torch.float32) * response_mask
    base = int(rng.integers(1 << 62))  # one draw per batch: the n responses of a prompt share its uid (a group)
    uids = np.array([str(uuid.UUID(int=base + k // run.n)) for k in range(bsz)], dtype=object)
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
    data.meta_info["global_token_num"] = attn.sum(-1).tolist()
    return data


def step_metrics(run: Run, step: int, kl_ctrl: FixedKLController) -> tuple[dict, float]:
    p, rng = run.p, run.rng
    run.kl_ar = 0.7 * run.kl_ar + float(rng.normal(0, 0.001))
    kl = max(0.0, (0.01 + p.kl_growth * run.frac(step)) * (1 - math.exp(-step / 15.0)) + run.kl_ar)
    data = batch_for(run, step, kl)
    metrics: dict = {}
    if p.algo in KL_IN_REWARD:
        data, kl_metrics = apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty="kl")
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(data, adv_estimator=ESTIMATOR[p.algo], gamma=1.0, lam=1.0, num_repeat=run.n,
                             norm_adv_by_std_in_grpo=True, config=AlgoConfig())
    mask = data.batch["response_mask"].float()
    ent_tokens = torch.tensor(rng.gamma(4.0, run.entropy(step) / 4.0, tuple(mask.shape)), dtype=torch.float32)
    metrics["actor/entropy"] = float(agg_loss(loss_mat=ent_tokens, loss_mask=mask, loss_agg_mode="token-mean"))
    metrics.update(calculate_debug_metrics(data))
    metrics.update(compute_rollout_corr_metrics_from_logprobs(data.batch["old_log_probs"], data.batch["rollout_log_probs"],
                                                              data.batch["response_mask"]))
    resp = float(mask.sum(-1).mean())
    # generation dominates a step: its time follows the response length (70 %) around a fixed part
    run.len0 = run.len0 or max(resp, 1.0)
    step_dur = p.step_s * (0.3 + 0.7 * resp / run.len0) * float(rng.uniform(1 - p.jitter, 1 + p.jitter))
    parts = {"gen": 0.45, "reward": 0.05, "old_log_prob": 0.08, "ref": 0.07, "adv": 0.01, "update_actor": 0.19}
    if p.algo == "ppo":
        parts.update(values=0.05, update_critic=0.10)
    scale = step_dur / sum(parts.values())
    timing_raw = {k: v * scale for k, v in parts.items()}
    if p.save_freq and step % p.save_freq == 0:
        timing_raw["save_checkpoint"] = float(rng.uniform(0.1, 0.6)) * p.step_s
        step_dur += timing_raw["save_checkpoint"]
    timing_raw["step"] = step_dur
    mb = 4
    adv = data.batch["advantages"]
    # the policy gradient scales with the share of tokens that carry an advantage: none, no gradient
    signal = float(((adv.abs() > 1e-6).float() * mask).sum() / mask.sum().clamp(min=1))
    grad = np.exp(rng.normal(math.log(0.6), 0.15, mb))
    if p.warmup:
        grad = grad * (1 + 24 * math.exp(-step / 8.0))
    pg_loss = rng.normal(0, 0.05, mb)
    if p.family == "zero_signal" and ramp(p, step) >= 1.0:
        grad, pg_loss = grad * max(signal, 1.0 / 40.0), pg_loss * signal
    actor = {"actor/pg_loss": list(pg_loss), "actor/pg_clipfrac": list(np.abs(rng.normal(0.02, 0.005, mb))),
             "actor/ppo_kl": list(np.abs(rng.normal(2e-4, 5e-5, mb))), "actor/pg_clipfrac_lower": [0.0] * mb,
             "actor/grad_norm": list(grad)}
    if p.algo not in KL_IN_REWARD:
        actor["actor/kl_loss"] = list(kl + rng.normal(0, 0.0005, mb))
        actor["actor/kl_coef"] = [0.001] * mb
    metrics.update(reduce_metrics(actor))
    metrics["actor/lr"] = 1e-6 * min(1.0, step / 10.0) if p.warmup else 1e-6
    live = 38.0 * GIB + 6.0 * GIB * resp / p.cap + float(rng.normal(0, 0.05 * GIB))
    run.peak = max(run.peak, live - 3.0 * GIB * max(0, 4 - step))
    metrics["actor/perf/max_memory_allocated_gb"] = run.peak / GIB
    metrics["actor/perf/max_memory_reserved_gb"] = run.peak / GIB + 4.0
    metrics["actor/perf/cpu_memory_used_gb"] = 210.0 + float(rng.normal(0, 1))
    if p.algo == "ppo":
        metrics.update(reduce_metrics({"critic/vf_loss": list(np.abs(rng.normal(0.1, 0.02, mb))),
                                       "critic/vf_clipfrac": [0.01] * mb,
                                       "critic/grad_norm": list(np.abs(rng.normal(1, 0.2, mb)))}))
        metrics["critic/lr"] = 1e-5
    if p.async_:  # trainer_base.py: staleness = global_steps - 1 - max_global_steps, in weight versions
        lag = rng.integers(0, 3, run.prompts).astype(float)
        if p.family == "staleness":
            lag = lag + (p.magnitude - 1.0) * ramp(p, step) + rng.integers(0, 2, run.prompts)
        metrics["training/off_policy/trajectory_staleness/mean"] = float(lag.mean())
        metrics["training/off_policy/trajectory_staleness/max"] = float(lag.max())
        metrics["training/off_policy/trajectory_staleness/min"] = float(lag.min())
    if p.algo == "dapo":  # the dynamic-sampling loop's count of generation batches this step
        gen = 1.0 + float(rng.poisson(0.4))
        if p.family == "gen_batches":
            gen += (p.magnitude - 1.0) * ramp(p, step) + float(rng.poisson(0.5) * (ramp(p, step) > 0))
        metrics["train/num_gen_batches"] = gen
    metrics["training/global_step"] = step
    metrics["training/epoch"] = 0
    metrics.update(compute_data_metrics(batch=data, use_critic=p.algo == "ppo"))
    metrics.update(compute_timing_metrics(batch=data, timing_raw=timing_raw))
    metrics.update(compute_throughout_metrics(batch=data, timing_raw=timing_raw, n_gpus=8))
    return metrics, step_dur


def _log_attempt(path: Path, run: Run, first: int, last: int, t: float, times: list[float]) -> float:
    p = run.p
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    tracker = Tracking(project_name="verl-ops-signals", experiment_name=p.name, default_backend=["file"], config={})
    kl_ctrl = FixedKLController(kl_coef=0.001)
    for step in range(first, last + 1):
        metrics, gap = step_metrics(run, step, kl_ctrl)
        if p.test_freq and step % p.test_freq == 0:  # validation runs outside the step timer
            # a validation pass takes what its data set takes (up to ~6 min), not a multiple of a 1-h step
            metrics["timing_s/testing"] = float(run.rng.uniform(0.3, 6.0)) * min(p.step_s, 60.0)
            metrics["val-core/openai/gsm8k/reward/mean@4"] = float(metrics["critic/score/mean"]) + float(run.rng.normal(0, 0.02))
            gap += metrics["timing_s/testing"]
        t += gap
        times.append(t)
        tracker.log(data=metrics, step=step)
    del tracker
    return t


def write_plan(out: Path, p: Plan, seed: int) -> dict:
    run = Run(p, np.random.default_rng(seed))
    times: list[float] = []
    raw = b""
    restart_index = None
    tmp = out / f"{p.name}.jsonl"
    if p.resume:  # a crash two-thirds in, resumed from the last checkpoint (or 10 steps back) after 5 min
        crash = (2 * p.steps) // 3
        back = crash - (crash % p.save_freq if p.save_freq else 10)
        t = _log_attempt(tmp, run, 1, crash, T0, times)
        raw = tmp.read_bytes()
        restart_index = len(times)
        _log_attempt(tmp, run, back + 1, p.steps, t + 300.0, times)
    else:
        _log_attempt(tmp, run, 1, p.steps, T0, times)
    raw += tmp.read_bytes()
    tmp.unlink()
    with gzip.GzipFile(out / f"{p.name}.jsonl.gz", "wb", mtime=0) as fh:
        fh.write(raw)
    alerts, deadline, _, boundary = FAMILIES.get(p.family, ([], 0, (), 0.0))
    truth = {"run": p.name, "algo": p.algo, "fault": p.family, "variant": None, "step_s": p.step_s, "steps": p.steps,
             "onset_step": p.onset, "end_step": None, "alerts": alerts,
             "deadline_steps": p.ramp_steps + deadline if p.onset else None, "deadline_s": None,
             "magnitude": p.magnitude or None, "ramp_steps": p.ramp_steps if p.onset else None,
             "above_boundary": p.magnitude >= boundary if p.onset else None,
             "restart_index": restart_index, "times": times}
    (out / f"{p.name}.truth.json").write_text(json.dumps(truth))
    return truth


def write_all(out: Path, seed: int, only: set[str] | None, healthy: int = 200, shard: str = "0/1") -> None:
    out.mkdir(parents=True, exist_ok=True)
    part, of = (int(x) for x in shard.split("/"))
    # healthy runs and the sweep interleaved, so a corpus cut short still has both; seeds by place in each list
    seeded = [(p, seed * 10000 + k) for k, p in enumerate(healthy_plans(seed, healthy))]
    sweep = [(p, seed * 10000 + healthy + k) for k, p in enumerate(sweep_plans())]
    order = [x for pair in zip_longest(seeded, sweep) for x in pair if x is not None]
    for i, (plan, plan_seed) in enumerate(order):
        if i % of != part or (only is not None and plan.name not in only):
            continue
        if (out / f"{plan.name}.truth.json").exists():
            continue
        write_plan(out, plan, plan_seed)
        print(plan.name, flush=True)
